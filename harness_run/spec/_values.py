"""Value types of the spec: prompts, skills, repos, MCP servers, secrets, resources, network."""

from __future__ import annotations

import re
from pathlib import PurePosixPath
from typing import Annotated, Any, ClassVar, Literal

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
from harness_run.spec._checks import (
    check_env_key,
    check_env_name,
    check_env_value,
    check_header,
    check_secret_name,
    check_url_has_no_credentials,
    placeholders,
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

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$")
_QUANTITY = re.compile(r"^([0-9]+(\.[0-9]+)?)(m|k|M|G|T|Ki|Mi|Gi|Ti)?$")
_HOST = re.compile(r"^(\*\.)?([a-z0-9]([-a-z0-9]*[a-z0-9])?\.)*[a-z0-9]([-a-z0-9]*[a-z0-9])?(:[0-9]{1,5})?$")
_REPO_FIX = "remove the token from the URL and name a secret instead: RepoSource.git(url, auth='GH_TOKEN')"


def _check_simple_name(value: str, what: str) -> str:
    if not _NAME.match(value):
        raise spec_fail(
            f"{value!r} is not a valid {what}",
            "use 1-63 letters, digits, '.', '_' or '-', starting with a letter or digit",
        )
    return value


def _check_relative(path: str | None, what: str) -> str | None:
    if path is None:
        return None
    pure = PurePosixPath(path)
    if pure.is_absolute() or ".." in pure.parts or not path.strip():
        raise spec_fail(
            f"{what} {path!r} must be a relative path inside the source", "drop leading '/' and any '..'"
        )
    return path


class SystemPrompt(SpecModel):
    """How the agent's system prompt is built.

    ``SystemPrompt.inherit(append=...)`` keeps the harness's own prompt and appends text;
    ``SystemPrompt.replace(text)`` (or a plain ``str`` on the spec) replaces it.
    """

    mode: Literal["inherit", "replace"] = "inherit"
    text: str = ""

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
        if isinstance(data, dict) and "append" in data and "text" not in data:
            return {
                "mode": data.get("mode", "inherit"),
                "text": data["append"],
                **{k: v for k, v in data.items() if k not in {"append", "mode"}},
            }
        return data


# --- skills -----------------------------------------------------------------------------------


class GitSkill(SpecModel):
    """Skills from a git repository, cloned at ``ref`` and pinned to the commit at compile time."""

    kind: Literal["git"] = "git"
    url: str
    ref: str | None = None
    subdir: str | None = None
    name: str | None = None

    @field_validator("url")
    @classmethod
    def _url(cls, url: str) -> str:
        check_url_has_no_credentials(url, "skill", "skills are cloned at build time: use a public URL")
        return url

    @field_validator("subdir")
    @classmethod
    def _subdir(cls, value: str | None) -> str | None:
        return _check_relative(value, "subdir")

    @field_validator("name")
    @classmethod
    def _name(cls, value: str | None) -> str | None:
        return None if value is None else _check_simple_name(value, "skill name")

    @property
    def staged_name(self) -> str:
        if self.name:
            return self.name
        tail = self.subdir.rstrip("/").rsplit("/", 1)[-1] if self.subdir else ""
        base = tail or self.url.rstrip("/").rsplit("/", 1)[-1].rsplit(":", 1)[-1]
        return re.sub(r"[^A-Za-z0-9_.-]", "-", base.removesuffix(".git")) or "skills"


class LocalSkill(SpecModel):
    """Skills from a local directory, copied into the build context."""

    kind: Literal["local"] = "local"
    path: str
    name: str | None = None

    @field_validator("name")
    @classmethod
    def _name(cls, value: str | None) -> str | None:
        return None if value is None else _check_simple_name(value, "skill name")

    @property
    def staged_name(self) -> str:
        if self.name:
            return self.name
        base = self.path.rstrip("/\\").replace("\\", "/").rsplit("/", 1)[-1]
        return re.sub(r"[^A-Za-z0-9_.-]", "-", base) or "skills"


def _kind_of(default_for: dict[str, str], fallback: str):  # type: ignore[no-untyped-def]
    """A discriminator that reads ``kind``, else infers it from a telling key (for spec files)."""

    def pick(value: Any) -> str | None:
        if isinstance(value, dict):
            kind = value.get("kind")
            if kind is not None:
                return kind if isinstance(kind, str) else None
            return next((k for key, k in default_for.items() if key in value), fallback)
        return getattr(value, "kind", None)

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
    url: str
    ref: str | None = None
    auth: str | None = None
    path: str | None = None
    depth: int | None = Field(default=None, gt=0)

    @field_validator("url")
    @classmethod
    def _url(cls, url: str) -> str:
        check_url_has_no_credentials(url, "repository", _REPO_FIX)
        return url

    @field_validator("auth")
    @classmethod
    def _auth(cls, value: str | None) -> str | None:
        return None if value is None else check_secret_name(value)

    @field_validator("path")
    @classmethod
    def _path(cls, value: str | None) -> str | None:
        return _check_relative(value, "path")

    @property
    def dir_name(self) -> str:
        if self.path:
            return self.path
        return self.url.rstrip("/").rsplit("/", 1)[-1].rsplit(":", 1)[-1].removesuffix(".git") or "repo"


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


def _check_secret_map(mapping: dict[str, str], what: str) -> dict[str, str]:
    for key, ref in mapping.items():
        names = placeholders(ref) or [ref]
        for name in names:
            check_secret_name(name)
        if what == "env_secrets":
            check_env_name(key, "env_secrets keys are environment variable names")
    return mapping


class StdioMcpServer(SpecModel):
    """An MCP server the harness starts as a subprocess."""

    kind: Literal["stdio"] = "stdio"
    name: str
    command: str
    args: tuple[str, ...] = ()
    env: dict[str, str] = Field(default_factory=dict[str, str])
    env_secrets: dict[str, str] = Field(default_factory=dict[str, str])

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        return _check_simple_name(value, "MCP server name")

    @field_validator("env")
    @classmethod
    def _env(cls, env: dict[str, str]) -> dict[str, str]:
        for key, value in env.items():
            check_env_name(key, "MCP server env")
            check_env_key(key)
            check_env_value(key, value)
        return env

    @field_validator("env_secrets")
    @classmethod
    def _env_secrets(cls, value: dict[str, str]) -> dict[str, str]:
        return _check_secret_map(value, "env_secrets")

    def secret_names(self) -> list[str]:
        return [n for ref in self.env_secrets.values() for n in (placeholders(ref) or [ref])]


class RemoteMcpServer(SpecModel):
    """An MCP server reached over HTTP (streamable HTTP or SSE)."""

    kind: Literal["remote"] = "remote"
    name: str
    url: str
    transport: Literal["http", "sse"] = "http"
    headers: dict[str, str] = Field(default_factory=dict[str, str])
    header_secrets: dict[str, str] = Field(default_factory=dict[str, str])

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        return _check_simple_name(value, "MCP server name")

    @field_validator("url")
    @classmethod
    def _url(cls, url: str) -> str:
        if not url.startswith(("http://", "https://")):
            raise spec_fail(f"{url!r} is not an http(s) URL", "give the server's full https:// URL")
        check_url_has_no_credentials(url, "MCP server", "use header_secrets for credentials")
        return url

    @field_validator("headers")
    @classmethod
    def _headers(cls, headers: dict[str, str]) -> dict[str, str]:
        for name, value in headers.items():
            check_header(name, value)
        return headers

    @field_validator("header_secrets")
    @classmethod
    def _header_secrets(cls, value: dict[str, str]) -> dict[str, str]:
        return _check_secret_map(value, "header_secrets")

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
    """A secret the agent may use: only its NAME is in the spec; each run supplies the value."""

    _positional: ClassVar[tuple[str, ...]] = ("name",)
    name: str
    required: bool = True
    description: str = ""
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

    @model_validator(mode="before")
    @classmethod
    def _from_str(cls, data: Any) -> Any:
        return {"name": data} if isinstance(data, str) else data

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        return check_secret_name(value)


class Resources(SpecModel):
    """CPU and memory for one sandbox (Kubernetes quantities), requests = limits."""

    cpu: str = "1"
    memory: str = "2Gi"
    ephemeral_storage: str = "10Gi"

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

    @model_validator(mode="before")
    @classmethod
    def _shorthand(cls, data: Any) -> Any:
        if isinstance(data, str):
            return {"egress": data}
        if isinstance(data, list | tuple):
            return {"egress": "allowlist", "allow_hosts": data}
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
