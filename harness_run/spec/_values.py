"""Value types of the spec: prompts, skills, repos, MCP servers, secrets, resources, network."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from pathlib import PurePosixPath
from typing import TYPE_CHECKING, Annotated, Any, Literal, cast

from pydantic import (
    Discriminator,
    Field,
    SerializerFunctionWrapHandler,
    Tag,
    field_validator,
    model_serializer,
    model_validator,
)

from harness_run.spec._base import SpecModel, spec_fail
from harness_run.spec._checks import placeholders
from harness_run.spec._types import (
    Command,
    EnvSecretMap,
    EnvSettings,
    GitRef,
    Headers,
    HeaderSecretMap,
    McpServerName,
    McpUrl,
    RepoDir,
    RepoUrl,
    SecretName,
    SkillName,
    SkillPath,
    SkillSubdir,
    SkillUrl,
    Text,
)

__all__ = [
    "GitRepo",
    "GitSkill",
    "LocalSkill",
    "McpServer",
    "McpServerSpec",
    "Network",
    "RemoteMcpServer",
    "RepoSource",
    "RepoSpec",
    "Resources",
    "Secret",
    "SkillSource",
    "SkillSpec",
    "StdioMcpServer",
    "SystemPrompt",
]

_QUANTITY = re.compile(r"^([0-9]+(\.[0-9]+)?)(m|k|M|G|T|Ki|Mi|Gi|Ti)?$")
_HOST = re.compile(r"^(\*\.)?([a-z0-9]([-a-z0-9]*[a-z0-9])?\.)*[a-z0-9]([-a-z0-9]*[a-z0-9])?(:[0-9]{1,5})?$")


class SystemPrompt(SpecModel):
    """How the agent's system prompt is built.

    ``SystemPrompt.inherit(append=...)`` keeps the harness's own prompt and appends text;
    ``SystemPrompt.replace(text)`` (or a plain ``str`` on the spec) replaces it.
    """

    mode: Literal["inherit", "replace"] = "inherit"
    text: Text = ""

    @staticmethod
    def inherit(append: str = "") -> SystemPrompt:
        return SystemPrompt(mode="inherit", text=append)

    @staticmethod
    def replace(text: str) -> SystemPrompt:
        return SystemPrompt(mode="replace", text=text)

    @model_validator(mode="before")
    @classmethod
    def _from_str(cls, data: Any) -> Any:
        if isinstance(data, str):
            return {"mode": "replace", "text": data}
        fields = _as_mapping(data)
        if fields is not None and "append" in fields and "text" not in fields:
            return {
                "mode": fields.get("mode", "inherit"),
                "text": fields["append"],
                **{k: v for k, v in fields.items() if k not in {"append", "mode"}},
            }
        return data


# --- skills -----------------------------------------------------------------------------------


class GitSkill(SpecModel):
    """Skills from a git repository, cloned at ``ref`` and pinned to the commit at compile time."""

    kind: Literal["git"] = "git"
    url: SkillUrl
    ref: GitRef | None = None
    subdir: SkillSubdir | None = None
    name: SkillName | None = None

    @property
    def staged_name(self) -> str:
        if self.name:
            return self.name
        tail = PurePosixPath(self.subdir).name if self.subdir else ""
        base = tail or self.url.rstrip("/").rsplit("/", 1)[-1].rsplit(":", 1)[-1]
        return _file_name(base.removesuffix(".git"), "skills")


class LocalSkill(SpecModel):
    """Skills from a local directory, copied into the build context."""

    kind: Literal["local"] = "local"
    path: SkillPath
    name: SkillName | None = None

    @property
    def staged_name(self) -> str:
        if self.name:
            return self.name
        return _file_name(PurePosixPath(self.path.replace("\\", "/")).name, "skills")


def _file_name(base: str, fallback: str) -> str:
    """``base`` as one safe path component (never '', '.' or '..')."""
    name = re.sub(r"[^A-Za-z0-9_.-]", "-", base)
    return name if name.strip(".") else fallback


def _as_mapping(value: object) -> Mapping[Any, Any] | None:
    return cast("Mapping[Any, Any]", value) if isinstance(value, Mapping) else None


def _kind_of(default_for: dict[str, str], fallback: str) -> Callable[[Any], str | None]:
    """A discriminator that reads ``kind``, else infers it from a telling key (for spec files)."""

    def pick(value: Any) -> str | None:
        fields = _as_mapping(value)
        if fields is not None:
            kind = fields.get("kind")
            if kind is not None:
                return kind if isinstance(kind, str) else None
            return next((k for key, k in default_for.items() if key in fields), fallback)
        kind = getattr(value, "kind", None)
        return kind if isinstance(kind, str) else None

    return pick


SkillSpec = Annotated[
    Annotated[GitSkill, Tag("git")] | Annotated[LocalSkill, Tag("local")],
    Discriminator(_kind_of({"path": "local"}, "git")),
]


class SkillSource:
    """Constructors for skill sources: ``SkillSource.git(url, ref=, subdir=)``, ``.local(path)``."""

    @staticmethod
    def git(url: str, ref: str | None = None, subdir: str | None = None, name: str | None = None) -> GitSkill:
        return GitSkill(url=url, ref=ref, subdir=subdir, name=name)

    @staticmethod
    def local(path: str, name: str | None = None) -> LocalSkill:
        return LocalSkill(path=str(path), name=name)


# --- repos ------------------------------------------------------------------------------------


class GitRepo(SpecModel):
    """A repository cloned into the workspace before the agent runs.

    ``auth`` names a secret holding a token; it is used for the clone and left configured so the
    agent can push (the token itself is never written into the spec, image or store).
    """

    kind: Literal["git"] = "git"
    url: RepoUrl
    ref: GitRef | None = None
    auth: SecretName | None = None
    path: RepoDir | None = None
    depth: int | None = Field(default=None, gt=0)

    @property
    def dir_name(self) -> str:
        if self.path:
            return self.path
        return _file_name(
            self.url.rstrip("/").rsplit("/", 1)[-1].rsplit(":", 1)[-1].removesuffix(".git"), "repo"
        )


RepoSpec = GitRepo


class RepoSource:
    """Constructors for repositories: ``RepoSource.git(url, ref=, auth=SECRET_NAME)``."""

    @staticmethod
    def git(
        url: str,
        ref: str | None = None,
        auth: str | None = None,
        path: str | None = None,
        depth: int | None = None,
    ) -> GitRepo:
        return GitRepo(url=url, ref=ref, auth=auth, path=path, depth=depth)


# --- MCP servers ------------------------------------------------------------------------------


class StdioMcpServer(SpecModel):
    """An MCP server the harness starts as a subprocess."""

    kind: Literal["stdio"] = "stdio"
    name: McpServerName
    command: Command
    args: tuple[Text, ...] = ()
    env: EnvSettings = Field(default_factory=dict[str, str])
    env_secrets: EnvSecretMap = Field(default_factory=dict[str, str])

    if TYPE_CHECKING:  # what type checkers show users: any sequence of arguments

        def __init__(
            self,
            *,
            kind: Literal["stdio"] = "stdio",
            name: str,
            command: str,
            args: Sequence[str] = (),
            env: Mapping[str, str] = ...,
            env_secrets: Mapping[str, str] = ...,
        ) -> None: ...

    def secret_names(self) -> list[str]:
        return [n for ref in self.env_secrets.values() for n in (placeholders(ref) or [ref])]


class RemoteMcpServer(SpecModel):
    """An MCP server reached over HTTP (streamable HTTP or SSE)."""

    kind: Literal["remote"] = "remote"
    name: McpServerName
    url: McpUrl
    transport: Literal["http", "sse"] = "http"
    headers: Headers = Field(default_factory=dict[str, str])
    header_secrets: HeaderSecretMap = Field(default_factory=dict[str, str])

    def secret_names(self) -> list[str]:
        return [n for ref in self.header_secrets.values() for n in (placeholders(ref) or [ref])]


McpServerSpec = Annotated[
    Annotated[StdioMcpServer, Tag("stdio")] | Annotated[RemoteMcpServer, Tag("remote")],
    Discriminator(_kind_of({"command": "stdio"}, "remote")),
]


class McpServer:
    """Constructors for MCP servers.

    A secret reference is either a bare secret name (the whole value) or a template with
    ``${NAME}`` placeholders, e.g. ``{"Authorization": "Bearer ${GH_TOKEN}"}``.
    """

    @staticmethod
    def github(
        token_secret: str = "GH_TOKEN", url: str = "https://api.githubcopilot.com/mcp/", name: str = "github"
    ) -> RemoteMcpServer:
        return RemoteMcpServer(
            name=name, url=url, header_secrets={"Authorization": f"Bearer ${{{token_secret}}}"}
        )

    @staticmethod
    def remote(
        name: str,
        url: str,
        headers: dict[str, str] | None = None,
        header_secrets: dict[str, str] | None = None,
        transport: Literal["http", "sse"] = "http",
    ) -> RemoteMcpServer:
        return RemoteMcpServer(
            name=name,
            url=url,
            headers=headers or {},
            header_secrets=header_secrets or {},
            transport=transport,
        )

    @staticmethod
    def stdio(
        name: str,
        command: str,
        args: list[str] | tuple[str, ...] = (),
        env: dict[str, str] | None = None,
        env_secrets: dict[str, str] | None = None,
    ) -> StdioMcpServer:
        return StdioMcpServer(
            name=name, command=command, args=tuple(args), env=env or {}, env_secrets=env_secrets or {}
        )


# --- secrets, resources, network --------------------------------------------------------------


class Secret(SpecModel):
    """A secret the agent may use: only its NAME is in the spec; each run supplies the value.

    ``Secret("GH_TOKEN", required=False)``: the name may also be given positionally.
    """

    name: SecretName
    required: bool = True
    description: Text = ""
    expose: bool | None = None
    """Whether the agent's own shell (its tool commands, ``exec()``) gets the value as an environment
    variable. ``None`` (default): yes, unless the secret is consumed elsewhere — a repository's
    ``auth`` (given only to git) or an MCP server's ``header_secrets``/``env_secrets`` (given only to
    that server's config). ``True``: always (e.g. a ``GH_TOKEN`` the agent's ``gh`` CLI needs too)."""

    @model_serializer(mode="wrap")
    def _drop_unset_expose(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        data: dict[str, Any] = handler(self)
        if self.expose is None:  # keeps the data (and engine digests) of specs that do not use it
            data.pop("expose", None)
        return data

    if TYPE_CHECKING:

        def __init__(
            self, name: str, required: bool = True, description: str = "", expose: bool | None = None
        ) -> None: ...

    else:

        def __init__(self, /, *args: Any, **data: Any) -> None:
            if len(args) > 1:
                raise TypeError("Secret() takes the name positionally; give the other fields by keyword")
            super().__init__(**({"name": args[0]} if args else {}), **data)

    @model_validator(mode="before")
    @classmethod
    def _from_str(cls, data: Any) -> Any:
        return {"name": data} if isinstance(data, str) else data


class Resources(SpecModel):
    """CPU and memory for one sandbox (Kubernetes quantities), requests = limits."""

    cpu: str = "1"
    memory: str = "2Gi"
    ephemeral_storage: str = "10Gi"

    if TYPE_CHECKING:  # numbers are accepted too: cpu=2

        def __init__(
            self,
            *,
            cpu: str | float = "1",
            memory: str | float = "2Gi",
            ephemeral_storage: str | float = "10Gi",
        ) -> None: ...

    @field_validator("cpu", "memory", "ephemeral_storage", mode="before")
    @classmethod
    def _quantity(cls, value: Any) -> Any:
        if isinstance(value, int | float) and not isinstance(value, bool):
            value = f"{value:g}"
        if isinstance(value, str) and not _QUANTITY.match(value):
            raise spec_fail(f"{value!r} is not a Kubernetes quantity", "use e.g. '500m', '2', '4Gi'")
        return value


class Network(SpecModel):
    """Egress of the agent's sandbox: ``open``, ``none``, or an ``allowlist`` of hosts.

    On the spec, ``network="none"`` / ``"open"`` or a list of hosts are accepted as shorthands.
    """

    egress: Literal["open", "none", "allowlist"] = "open"
    allow_hosts: tuple[str, ...] = ()

    if TYPE_CHECKING:

        def __init__(
            self, *, egress: Literal["open", "none", "allowlist"] = "open", allow_hosts: Sequence[str] = ()
        ) -> None: ...

    @model_validator(mode="before")
    @classmethod
    def _shorthand(cls, data: Any) -> Any:
        if isinstance(data, str):
            return {"egress": data}
        if isinstance(data, list | tuple):
            hosts: Sequence[Any] = cast("Sequence[Any]", data)
            return {"egress": "allowlist", "allow_hosts": hosts}
        return data

    @field_validator("allow_hosts")
    @classmethod
    def _hosts(cls, hosts: tuple[str, ...]) -> tuple[str, ...]:
        for host in hosts:
            if not _HOST.match(host):
                raise spec_fail(f"{host!r} is not a host name", "use e.g. 'pypi.org' or '*.github.com'")
        return tuple(sorted(set(hosts)))

    @model_validator(mode="after")
    def _consistent(self) -> Network:
        if self.egress == "allowlist" and not self.allow_hosts:
            raise spec_fail(
                "an allowlist needs at least one host", "list hosts, or use 'none'", "allow_hosts"
            )
        if self.egress != "allowlist" and self.allow_hosts:
            raise spec_fail(
                f"allow_hosts is only used with egress 'allowlist', not {self.egress!r}",
                "set egress: allowlist or drop allow_hosts",
                "allow_hosts",
            )
        return self
