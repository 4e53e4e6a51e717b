"""``ServerPolicy``: what callers of the team server may change, set by the operator
(``serve --policy FILE`` and flags).

The engine author's spec is the limit. A caller's ``SessionConfig``/``TurnConfig`` overlay and
per-run ``secrets`` are checked against the policy before anything starts; a refusal is a
:class:`~harness_run.errors.PermissionDeniedError` (HTTP 403) naming the field (a JSON path such as
``config.workspace.host_dir``) and the policy key or ``serve`` flag that would allow it. By default
a caller may:

- pick the model only from ``allowed_models`` (default: none but the engine's own);
- set ``branch``/``base_branch``, ``harness`` (one baked into the image), ``reasoning_effort``,
  ``output_schema`` and ``git``;
- append to the system prompt (same mode, the engine's text kept as the start), not replace it;
- only tighten: ``security_policy`` keeps every deny and guard of the engine's, ``allowed_tools``
  may only shrink, ``disallowed_tools`` only grow, ``permission_mode`` only become stricter
  (plan < default < acceptEdits < bypassPermissions), ``approvals`` only add (every command
  pattern and tool of the engine's kept, ``file_writes`` never turned off, ``timeout_s`` only
  lowered: a waiting call holds the turn);
- only lower ``max_budget_usd``, ``max_turns`` and ``timeout`` (never clear or raise them);
- use no host directory, no shared workspace, no model endpoint of their own and no Vertex AI
  variables.

Operator credentials stay on the operator's endpoints: when the policy lets a caller choose an
endpoint (an ``*_BASE_URL`` secret, or a ``model_base_url`` other than the spec's), the same request
must bring its own model key, and every model key the server's environment holds must be overridden
(its own value, or ``""``), else the server's key would go to the caller's URL. Endpoints on the
server's own network are refused from remote callers unless ``allow_private_endpoints`` (see
:mod:`harness_run.server._endpoints`). Messages name variables, never their values.
"""

from __future__ import annotations

import ipaddress
import os
from collections.abc import Mapping
from fnmatch import fnmatchcase
from pathlib import Path
from typing import Any, Final, Self, cast

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from harness_run.errors import PermissionDeniedError, UsageError
from harness_run.server._endpoints import (
    GOOGLE_CREDENTIALS,
    KEY_VARIABLES,
    endpoint_problem,
    is_endpoint_variable,
    is_vertex_variable,
    vertex_through_proxy,
)
from harness_run.spec import AgentSpec, PermissionMode, SessionConfig, TurnConfig, effective_spec
from harness_run.vocab.envrules import PROVIDER_VARIABLES

__all__ = ["ServerPolicy", "served_spec"]

_MODE_RANK: Final[dict[str, int]] = {"plan": 0, "default": 1, "acceptEdits": 2, "bypassPermissions": 3}
_REGION: Final = frozenset("abcdefghijklmnopqrstuvwxyz0123456789-")
_PROJECT: Final = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-.:_")


def _allow(key: str, flag: str | None = None) -> str:
    return f"policy: {key}" + (f" (or serve {flag})" if flag else "")


class ServerPolicy(BaseModel):
    """What callers of ``harness-run serve`` may change (module docs). The defaults are the safe
    ones; every key loosens one rule. Load a YAML file with :meth:`from_file`."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    allowed_models: tuple[str, ...] = Field(
        default=(),
        description="Models callers may choose besides the engine's own; glob patterns "
        "('claude-*'), '*' for any.",
    )
    host_dir_root: Path | None = Field(
        default=None,
        description="Callers may use a host directory under this one as the workspace "
        "(symlinks and '..' resolved first); None: no host directories.",
    )
    allow_shared_workspace: bool = Field(
        default=False, description="Callers may use workspace.mode 'shared' (one workspace for all keys)."
    )
    allow_endpoints: bool = Field(
        default=False,
        description="Callers may choose the model endpoint (*_BASE_URL secrets, config.model_base_url) "
        "with their own key.",
    )
    allow_private_endpoints: bool = Field(
        default=False,
        description="Remote callers' endpoints may be on loopback, private or link-local networks.",
    )
    local_callers: bool = Field(
        default=True,
        description="Callers connecting over loopback count as local (their endpoints may be private); "
        "set false when a reverse proxy on this host forwards remote callers.",
    )
    allow_vertex: bool = Field(
        default=False,
        description="Callers may pass the Vertex AI variables (the proxy then uses the server's "
        "Google credentials unless the caller sends its own key file's content).",
    )
    permission_modes: tuple[PermissionMode, ...] = Field(
        default=(),
        description="Permission modes callers may choose even when more permissive than the engine's.",
    )
    allow_prompt_replace: bool = Field(
        default=False, description="Callers may replace the system prompt, not only append to it."
    )
    allow_looser_security: bool = Field(
        default=False,
        description="Callers may drop denies or guards of the engine's security_policy, widen its "
        "tool lists and drop its approvals.",
    )
    allow_higher_limits: bool = Field(
        default=False,
        description="Callers may raise or clear max_budget_usd, max_turns and timeout, and raise "
        "approvals.timeout_s.",
    )

    @field_validator("allowed_models")
    @classmethod
    def _models(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        if any(not m.strip() for m in value):
            raise ValueError("holds an empty model name; give model ids or glob patterns such as 'claude-*'")
        return value

    @field_validator("host_dir_root")
    @classmethod
    def _root(cls, value: Path | None) -> Path | None:
        if value is None:
            return None
        root = value.expanduser()
        if not root.is_absolute():
            raise ValueError(f"{str(value)!r} is not an absolute path; give the full path of a directory")
        if not root.is_dir():
            raise ValueError(f"{str(value)!r} is not a directory on this machine; create it or fix the path")
        return root.resolve()

    # --- loading --------------------------------------------------------------------------------

    @classmethod
    def from_file(cls, path: str | Path) -> Self:
        """The policy in a YAML file (empty file: the defaults). Raises UsageError naming the file
        and the key for a file that cannot be read, bad YAML, an unknown key or a bad value."""
        name = str(path)
        try:
            text = Path(path).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else type(exc).__name__
            raise UsageError(f"cannot read the policy file {name}: {reason}; give a YAML file") from None
        try:
            data: object = yaml.load(text, Loader=_UniqueKeyLoader)  # a SafeLoader subclass
        except yaml.YAMLError as exc:
            mark = getattr(exc, "problem_mark", None)
            where = f" at line {mark.line + 1}" if mark is not None else ""
            problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
            raise UsageError(f"the policy file {name} is not valid YAML{where}: {problem}") from None
        if data is None:
            data = {}
        if not isinstance(data, dict):
            raise UsageError(
                f"the policy file {name} must be a mapping of policy keys (got {type(data).__name__}); "
                f"the keys are {sorted(cls.model_fields)}"
            )
        return cls.validated(cast("dict[str, Any]", data), source=f"the policy file {name}")

    @classmethod
    def validated(cls, data: Mapping[str, Any], *, source: str = "the server policy") -> Self:
        """A policy from plain data (a file's, or flags merged over it); UsageError names the key."""
        try:
            return cls.model_validate(dict(data))
        except ValidationError as exc:
            raise UsageError(_describe(exc, source, sorted(cls.model_fields))) from None

    def override(self, **changes: Any) -> ServerPolicy:
        """This policy with ``changes`` (the ``serve`` flags) applied and validated."""
        return self.validated({**self.model_dump(exclude_unset=True), **changes}, source="serve flags")

    # --- checks ---------------------------------------------------------------------------------

    def is_remote(self, peer: str | None) -> bool:
        """Whether a caller connecting from ``peer`` (``request.remote``) is remote: any address but
        loopback, and loopback too unless ``local_callers``."""
        if not self.local_callers or not peer:
            return True
        try:
            return not ipaddress.ip_address(peer.split("%", 1)[0]).is_loopback
        except ValueError:
            return True  # a Unix socket has no address: remote, to be safe

    def check_session(self, spec: AgentSpec, config: dict[str, Any] | None, *, remote: bool = True) -> None:
        """Check a caller's session config (``POST /v1/engines/{name}/sessions``, ``/v1/workspaces``)
        against ``spec``. Raises PermissionDeniedError for a change the policy refuses, SpecError
        for a config that does not validate."""
        if not config:
            return
        overlay = SessionConfig.from_dict(config, source="config")
        given = overlay.model_fields_set
        self._check_overlay(spec, spec, overlay, remote=remote)
        if "security_policy" in given and overlay.security_policy is not None:
            self._check_security(spec, overlay)
        workspace = overlay.workspace
        if workspace is not None:
            if workspace.mode == "shared" and not self.allow_shared_workspace:
                raise _deny(
                    "config.workspace.mode",
                    "'shared' lets every key's sessions work in one workspace",
                    _allow("allow_shared_workspace"),
                )
            if workspace.host_dir is not None:
                self._check_host_dir(workspace.host_dir)

    def check_turn(
        self,
        spec: AgentSpec,
        session_config: dict[str, Any] | None,
        config: dict[str, Any] | None,
        secrets: Mapping[str, str],
        *,
        remote: bool = True,
        environ: Mapping[str, str] | None = None,
    ) -> None:
        """Check a turn's overlay (against the spec with the session's config applied) and its
        secrets. ``environ``: the server's environment (default ``os.environ``), whose model keys a
        run gets unless it passes its own."""
        session = SessionConfig.from_dict(session_config, source="session config") if session_config else None
        base = effective_spec(spec, session)
        turn = TurnConfig.from_dict(config, source="config") if config else None
        if turn is not None:
            self._check_overlay(spec, base, turn, remote=remote)
        self._check_secret_names(secrets, remote=remote, endpoints=True)
        chosen = [f"secrets.{n}" for n, v in sorted(secrets.items()) if is_endpoint_variable(n) and v]
        url = effective_spec(base, turn).model_base_url
        if url is not None and url != spec.model_base_url:  # None: the operator's environment's
            given_in_turn = turn is not None and "model_base_url" in turn.model_fields_set
            field = "config.model_base_url" if given_in_turn else "session.config.model_base_url"
            self._check_endpoint(field, url, remote=remote)  # the session's, again: this caller's
            chosen.append(field)
        if chosen:
            _check_own_key(chosen[0], secrets, os.environ if environ is None else environ)

    def check_exec(self, secrets: Mapping[str, str]) -> None:
        """Check an exec's secrets: no Vertex variables or Google credentials unless allowed, no
        endpoint variables unless allowed (the command's environment is the caller's to set, but
        not to point at the server's credentials)."""
        self._check_secret_names(secrets, remote=True, endpoints=False)

    # --- the rules ------------------------------------------------------------------------------

    def _check_overlay(
        self, spec: AgentSpec, base: AgentSpec, overlay: SessionConfig | TurnConfig, *, remote: bool
    ) -> None:
        given = overlay.model_fields_set
        model = overlay.model
        if (
            model is not None
            and model not in (spec.model, base.model)
            and not any(fnmatchcase(model, p) for p in self.allowed_models)
        ):
            raise _deny(
                "config.model",
                f"model {overlay.model!r} is not allowed on this server (the engine's is {spec.model!r})",
                _allow("allowed_models", "--allow-model MODEL"),
            )
        if overlay.model_base_url is not None and overlay.model_base_url != spec.model_base_url:
            self._check_endpoint("config.model_base_url", overlay.model_base_url, remote=remote)
        if overlay.system_prompt is not None and not self.allow_prompt_replace:
            old, new = base.system_prompt, overlay.system_prompt
            if new.mode != old.mode or not new.text.startswith(old.text):
                raise _deny(
                    "config.system_prompt",
                    "may only append to the engine's system prompt (same mode, the engine's text first)",
                    _allow("allow_prompt_replace"),
                )
        self._check_mode(base, overlay)
        if not self.allow_looser_security:
            added = sorted(set(overlay.allowed_tools or ()) - set(base.allowed_tools))
            if overlay.allowed_tools is not None and added:
                raise _deny("config.allowed_tools", f"adds {added} to the engine's", _looser())
            dropped = sorted(set(base.disallowed_tools) - set(overlay.disallowed_tools or ()))
            if overlay.disallowed_tools is not None and dropped:
                raise _deny("config.disallowed_tools", f"drops {dropped} from the engine's", _looser())
        if "approvals" in given:
            self._check_approvals(base, overlay)
        if not self.allow_higher_limits:
            for name in ("max_budget_usd", "max_turns", "timeout"):
                if name in given and (name != "timeout" or overlay.timeout is not None):
                    _check_limit(name, getattr(base, name), getattr(overlay, name))

    def _check_approvals(self, base: AgentSpec, overlay: SessionConfig | TurnConfig) -> None:
        """An overlay's ``approvals`` replaces the engine's whole policy, so it must keep every
        pattern, tool and ``file_writes`` of it (it may add more), and may only shorten
        ``timeout_s`` (a waiting call holds the turn and its sandbox: a limit, like ``timeout``)."""
        old, new = base.approvals, overlay.approvals
        if old is None:
            return
        keep = "the overlay replaces the engine's approvals: repeat the engine's and add to them"
        if new is None:
            if old.asks_anything and not self.allow_looser_security:
                raise _deny("config.approvals", f"clears the engine's approvals; {keep}", _looser())
            return
        if not self.allow_looser_security:
            for name in ("commands", "tools"):
                dropped = [p for p in getattr(old, name) if p not in getattr(new, name)]
                if dropped:
                    raise _deny(
                        f"config.approvals.{name}", f"drops the engine's {dropped}; {keep}", _looser()
                    )
            if old.file_writes and not new.file_writes:
                raise _deny(
                    "config.approvals.file_writes", f"turns off the engine's setting; {keep}", _looser()
                )
        if new.timeout_s > old.timeout_s and not self.allow_higher_limits:
            raise _deny(
                "config.approvals.timeout_s",
                f"raises ({new.timeout_s:g} > {old.timeout_s:g}) the limit; callers may only lower it",
                _allow("allow_higher_limits"),
            )

    def _check_mode(self, base: AgentSpec, overlay: SessionConfig | TurnConfig) -> None:
        mode = overlay.permission_mode
        if mode is None or _MODE_RANK[mode] <= _MODE_RANK[base.permission_mode]:
            return
        if mode not in self.permission_modes:
            raise _deny(
                "config.permission_mode",
                f"{mode!r} is more permissive than the engine's {base.permission_mode!r}",
                _allow("permission_modes", f"--allow-permission-mode {mode}"),
            )

    def _check_security(self, spec: AgentSpec, overlay: SessionConfig) -> None:
        if self.allow_looser_security or overlay.security_policy is None:
            return
        old, new = spec.security_policy, overlay.security_policy
        for name in ("denied_tools", "denied_bash_patterns"):
            dropped = [d for d in getattr(old, name) if d not in getattr(new, name)]
            if dropped:
                raise _deny(f"config.security_policy.{name}", f"drops the engine's {dropped}", _looser())
        for name in ("deny_network", "include_credential_guards"):
            if getattr(old, name) and not getattr(new, name):
                raise _deny(f"config.security_policy.{name}", "turns off the engine's setting", _looser())

    def _check_host_dir(self, host_dir: str) -> None:
        field = "config.workspace.host_dir"
        allow = _allow("host_dir_root", "--host-dir-root DIR")
        if self.host_dir_root is None:
            raise _deny(field, "this server lets callers use no host directory", allow)
        try:
            resolved = Path(host_dir).expanduser().resolve()
        except (OSError, RuntimeError, ValueError):
            raise _deny(field, "cannot be resolved on this server", allow) from None
        if not resolved.is_relative_to(self.host_dir_root):
            raise _deny(field, f"is not under {self.host_dir_root} (after resolving links)", allow)

    def _check_endpoint(self, field: str, url: str, *, remote: bool) -> None:
        if not self.allow_endpoints:
            raise _deny(
                field,
                "callers may not choose the model endpoint on this server",
                _allow("allow_endpoints", "--allow-endpoints"),
            )
        problem = endpoint_problem(url, private_ok=self.allow_private_endpoints or not remote)
        if problem is not None:
            text, private = problem
            allow = _allow("allow_private_endpoints", "--allow-private-endpoints")
            raise _deny(field, text, allow if private else "an http(s) URL without credentials")

    def _check_secret_names(self, secrets: Mapping[str, str], *, remote: bool, endpoints: bool) -> None:
        for name in sorted(secrets):
            field, value = f"secrets.{name}", secrets[name]
            if is_vertex_variable(name):
                self._check_vertex(field, name, value)
            if is_endpoint_variable(name) and value:
                if endpoints:
                    self._check_endpoint(field, value, remote=remote)
                elif not self.allow_endpoints:
                    raise _deny(field, "callers may not set model endpoints", _allow("allow_endpoints"))

    def _check_vertex(self, field: str, name: str, value: str) -> None:
        if not self.allow_vertex:
            raise _deny(
                field,
                "the Vertex AI variables and Google credentials are the operator's on this server",
                _allow("allow_vertex", "--allow-vertex"),
            )
        if name == GOOGLE_CREDENTIALS and value and not value.lstrip().startswith("{"):
            raise _deny(
                field,
                "names a file on the server; send the key file's JSON content instead",
                "secrets: the credentials' JSON content, not a path",
            )
        chars = _REGION if name == "CLOUD_ML_REGION" else _PROJECT
        if name in ("CLOUD_ML_REGION", "ANTHROPIC_VERTEX_PROJECT_ID") and not set(value) <= chars:
            raise _deny(field, "is not a plain region or project id", _allow("allow_vertex"))


def served_spec(engine: object) -> AgentSpec:
    """The spec an engine serves (every runtime's engine has one; the ``Engine`` protocol does not
    name it): the limits a caller's config is checked against."""
    spec: object = getattr(engine, "spec", None)
    if not isinstance(spec, AgentSpec):
        raise TypeError(f"{type(engine).__name__} has no AgentSpec to check a caller's config against")
    return spec


def _check_own_key(field: str, secrets: Mapping[str, str], environ: Mapping[str, str]) -> None:
    """The caller chose an endpoint (``field``): the run must carry the caller's own credential and
    none of the server's."""
    env = {n: environ[n] for n in PROVIDER_VARIABLES if environ.get(n)} | dict(secrets)
    if vertex_through_proxy(env):
        if not secrets.get(GOOGLE_CREDENTIALS):
            raise _deny(
                field,
                "a caller's endpoint on Vertex AI needs the caller's own Google credentials in the same "
                f"request (the server's would be sent there); pass {GOOGLE_CREDENTIALS} with a key "
                "file's JSON content",
                f"secrets.{GOOGLE_CREDENTIALS}",
            )
        return
    if not any(secrets.get(k) for k in KEY_VARIABLES):
        raise _deny(
            field,
            "a caller's model endpoint needs the caller's own model key in the same secrets (the "
            f"server's would be sent there); pass one of {sorted(KEY_VARIABLES)}",
            "secrets: your own model key",
        )
    server_keys = sorted(k for k in KEY_VARIABLES if environ.get(k) and k not in secrets)
    if server_keys:
        raise _deny(
            f"secrets.{server_keys[0]}",
            f"the server holds its own {server_keys[0]}, which would be sent to your endpoint too; "
            'pass your own value or "" for none',
            f"secrets.{server_keys[0]}: your own value or empty",
        )


def _check_limit(name: str, old: float | None, new: float | None) -> None:
    """``new`` may lower ``old``; None clears a limit (``timeout``: None inherits, checked by caller)."""
    if old is None or (new is not None and new <= old):
        return
    what = "clears" if new is None else f"raises ({new} > {old})"
    raise _deny(
        f"config.{name}",
        f"{what} the limit; callers may only lower it",
        _allow("allow_higher_limits"),
    )


def _looser() -> str:
    return _allow("allow_looser_security")


def _deny(field: str, problem: str, allow: str) -> PermissionDeniedError:
    return PermissionDeniedError(f"{field}: {problem}; allowed by {allow}", field=field, allow=allow)


def _describe(exc: ValidationError, source: str, keys: list[str]) -> str:
    lines: list[str] = []
    for error in exc.errors(include_url=False, include_input=False):
        where = ".".join(str(p) for p in error["loc"]) or "<policy>"
        if error["type"] == "extra_forbidden":
            lines.append(f"  - {where}: unknown key; the keys are {keys}")
        else:
            lines.append(f"  - {where}: {error['msg'].removeprefix('Value error, ')}")
    return f"invalid {source}:\n" + "\n".join(lines)


class _UniqueKeyLoader(yaml.SafeLoader):
    """Safe YAML that refuses a key given twice (the second would silently win)."""


def _unique_mapping(loader: yaml.SafeLoader, node: yaml.MappingNode) -> dict[Any, Any]:
    seen: set[object] = set()
    for key_node, _ in node.value:
        key: object = loader.construct_object(key_node)  # pyright: ignore[reportUnknownMemberType]
        if key in seen:
            raise yaml.constructor.ConstructorError(
                None, None, f"the key {key!r} is given twice", key_node.start_mark
            )
        seen.add(key)
    return loader.construct_mapping(node)


_UniqueKeyLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _unique_mapping)
