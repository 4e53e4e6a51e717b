"""``AgentSpec``: the declarative definition of an agent, compiled into an image and manifests."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, Literal, Self

from pydantic import BaseModel, Field, field_serializer, field_validator, model_validator
from pydantic_core import PydanticCustomError

from harness_run.spec._base import SpecModel, spec_fail
from harness_run.spec._checks import (
    check_dns_label,
    check_env_key,
    check_env_name,
    check_env_value,
    check_model_for_harness,
    check_requirement,
    check_url_has_no_credentials,
)
from harness_run.spec._values import (
    McpServerSpec,
    Network,
    RemoteMcpServer,
    RepoSpec,
    Resources,
    Secret,
    SkillSpec,
    SystemPrompt,
)

__all__ = [
    "HARNESSES",
    "AgentSpec",
    "Harness",
    "OutputSchema",
    "PermissionMode",
    "ReasoningEffort",
    "json_schema_of",
]

Harness = Literal["claude-code", "codex", "opencode"]
HARNESSES: tuple[Harness, ...] = ("claude-code", "codex", "opencode")
PermissionMode = Literal["default", "acceptEdits", "plan", "bypassPermissions"]
ReasoningEffort = Literal["minimal", "low", "medium", "high", "xhigh"]
OutputSchema = type[BaseModel] | dict[str, Any]

_DURATION = re.compile(r"^\s*([0-9]+(?:\.[0-9]+)?)\s*(ms|s|m|h)?\s*$")
_DEB_PACKAGE = re.compile(r"^[a-z0-9][a-z0-9+.-]+(=[A-Za-z0-9.+:~-]+)?$")


def json_schema_of(schema: OutputSchema | None) -> dict[str, Any] | None:
    """The JSON Schema of an output schema (a pydantic model class or a schema dict)."""
    if schema is None:
        return None
    if isinstance(schema, dict):
        return schema
    return schema.model_json_schema()


def parse_duration(value: Any) -> Any:
    """Seconds from a number or a string like '90s', '30m', '1.5h'."""
    if isinstance(value, str):
        match = _DURATION.match(value)
        if not match:
            raise spec_fail(f"{value!r} is not a duration", "use seconds, or e.g. '90s', '30m', '2h'")
        number = float(match.group(1))
        return number * {"ms": 0.001, "s": 1, "m": 60, "h": 3600}[match.group(2) or "s"]
    return value


def check_output_schema(value: Any) -> OutputSchema | None:
    if value is None:
        return None
    if isinstance(value, type) and issubclass(value, BaseModel):
        return value
    if not isinstance(value, dict):
        raise spec_fail(
            "output_schema must be a pydantic model class or a JSON Schema object",
            "pass e.g. MyResult (a BaseModel subclass) or {'type': 'object', ...}",
        )
    if value.get("type") != "object":
        raise spec_fail(
            "output_schema must describe a JSON object (type: object at the top)",
            "wrap the value in an object, e.g. {'type': 'object', 'properties': {...}}",
        )
    try:
        if not _str_keys_only(value):
            raise TypeError("non-string key")
        return json.loads(json.dumps(value, allow_nan=False))  # type: ignore[no-any-return]
    except (TypeError, ValueError):
        raise spec_fail(
            "output_schema is not JSON-serializable",
            "use only JSON types (string keys, finite numbers) inside the schema",
        ) from None
    except RecursionError:
        raise spec_fail("output_schema is nested too deeply", "simplify the schema") from None


def _str_keys_only(value: Any) -> bool:
    """JSON would silently turn 1 / None / True keys into strings (and the spec would not round-trip)."""
    if isinstance(value, dict):
        return all(isinstance(k, str) and _str_keys_only(v) for k, v in value.items())
    if isinstance(value, list | tuple):
        return all(_str_keys_only(v) for v in value)
    return True


class AgentSpec(SpecModel):
    """The definition of an agent: harness, model, prompt, skills, MCP servers, repos, packages,
    secret NAMES, limits and output schema. Frozen; every field but ``name``, ``harness`` and
    ``model`` has a default. Secret values never belong here: name them in ``secrets`` (or in
    ``auth`` / ``header_secrets`` / ``env_secrets``, which declare them automatically as required)
    and pass the values with each run.
    """

    name: str = Field(description="Kubernetes-safe name (DNS label) of the agent / engine.")
    harness: Harness = Field(description="The agent CLI that runs turns.")
    model: str = Field(min_length=1, description="Model id, e.g. 'claude-sonnet-4-6' or 'gpt-5.6-luna'.")
    extra_harnesses: tuple[Harness, ...] = Field(
        default=(), description="More harnesses baked into the image, selectable per session."
    )
    system_prompt: SystemPrompt = Field(
        default_factory=SystemPrompt,
        description="A str replaces the harness prompt; "
        "SystemPrompt.inherit(append=...) keeps it and appends.",
    )
    skills: tuple[SkillSpec, ...] = ()
    repos: tuple[RepoSpec, ...] = ()
    mcp_servers: tuple[McpServerSpec, ...] = ()
    packages: tuple[str, ...] = Field(default=(), description="pip requirements for the agent's environment.")
    system_packages: tuple[str, ...] = Field(default=(), description="Debian packages baked into the image.")
    secrets: tuple[Secret, ...] = Field(default=(), description="Secret NAMES a run must or may supply.")
    env: dict[str, str] = Field(default_factory=dict[str, str], description="Non-secret environment.")
    allowed_tools: tuple[str, ...] = ()
    disallowed_tools: tuple[str, ...] = ()
    permission_mode: PermissionMode = "bypassPermissions"
    max_turns: int | None = Field(default=None, gt=0, strict=True)
    max_budget_usd: float | None = Field(default=None, gt=0, allow_inf_nan=False, strict=True)
    reasoning_effort: ReasoningEffort | None = None
    output_schema: Any = Field(default=None, description="A pydantic model class or a JSON Schema object.")
    checkpoint: bool = Field(
        default=False,
        description="Snapshot native session files and the "
        "workspace after every turn so any process or sandbox can resume.",
    )
    timeout: float = Field(
        default=1800.0, gt=0, allow_inf_nan=False, description="Seconds one turn may take."
    )
    resources: Resources = Field(default_factory=Resources)
    network: Network = Field(default_factory=Network)
    setup_script: str | None = Field(default=None, description="Shell script run once per workspace.")
    model_base_url: str | None = Field(
        default=None, description="Model endpoint (gateway) URL; else the standard env variables."
    )

    # ---- field checks ----------------------------------------------------------------------

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        return check_dns_label(value, "agent name")

    @field_validator("extra_harnesses")
    @classmethod
    def _extra(cls, value: tuple[Harness, ...]) -> tuple[Harness, ...]:
        return tuple(sorted(set(value)))

    @field_validator("packages")
    @classmethod
    def _packages(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        checked: list[str] = []
        for index, item in enumerate(value):
            try:
                checked.append(check_requirement(item))
            except PydanticCustomError as exc:  # name the entry: packages[2]
                ctx = exc.context or {}
                raise spec_fail(str(ctx.get("message")), str(ctx.get("fix")), f"[{index}]") from None
        return tuple(checked)

    @field_validator("system_packages")
    @classmethod
    def _system_packages(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for item in value:
            if not _DEB_PACKAGE.match(item):
                raise spec_fail(f"{item!r} is not a Debian package name", "use e.g. 'ripgrep' or 'jq=1.7*'")
        return tuple(sorted(set(value)))

    @field_validator("env")
    @classmethod
    def _env(cls, env: dict[str, str]) -> dict[str, str]:
        for key, value in env.items():
            check_env_name(key, "env keys")
            check_env_key(key)
            check_env_value(key, value)
        return env

    @field_validator("output_schema", mode="before")
    @classmethod
    def _output_schema(cls, value: Any) -> Any:
        return check_output_schema(value)

    @field_validator("timeout", mode="before")
    @classmethod
    def _timeout(cls, value: Any) -> Any:
        return parse_duration(value)

    @field_validator("model_base_url")
    @classmethod
    def _base_url(cls, value: str | None) -> str | None:
        if value is None:
            return None
        if not value.startswith(("http://", "https://")):
            raise spec_fail(f"{value!r} is not an http(s) URL", "give the endpoint's full URL")
        check_url_has_no_credentials(value, "model endpoint", "pass the key as a secret per run")
        return value.rstrip("/")

    @field_serializer("output_schema")
    def _dump_schema(self, value: Any) -> dict[str, Any] | None:
        return json_schema_of(value)

    # ---- cross-field checks ----------------------------------------------------------------

    @model_validator(mode="after")
    def _cross_checks(self) -> Self:
        check_model_for_harness(self.model, self.harness)
        if self.harness in self.extra_harnesses:
            object.__setattr__(
                self, "extra_harnesses", tuple(h for h in self.extra_harnesses if h != self.harness)
            )
        both = sorted(set(self.allowed_tools) & set(self.disallowed_tools))
        if both:
            raise spec_fail(
                f"tools {both} are both allowed and disallowed",
                "remove them from one of allowed_tools / disallowed_tools",
                field="disallowed_tools",
            )
        _unique([m.name for m in self.mcp_servers], "MCP server names", "mcp_servers")
        _unique([s.staged_name for s in self.skills], "skill names (set name= to tell them apart)", "skills")
        _unique([r.dir_name for r in self.repos], "repository paths (set path= to tell them apart)", "repos")
        _unique([s.name for s in self.secrets], "secret names", "secrets")
        object.__setattr__(self, "secrets", self._with_referenced_secrets())
        return self

    def _with_referenced_secrets(self) -> tuple[Secret, ...]:
        declared = {s.name for s in self.secrets}
        referenced: list[str] = [r.auth for r in self.repos if r.auth]
        for server in self.mcp_servers:
            referenced.extend(server.secret_names())
        extra = [Secret(name=n) for n in dict.fromkeys(referenced) if n not in declared]
        return (*self.secrets, *extra)

    # ---- convenience -----------------------------------------------------------------------

    @property
    def harnesses(self) -> tuple[Harness, ...]:
        """The primary harness followed by the extra ones baked into the image."""
        return (self.harness, *self.extra_harnesses)

    @property
    def output_json_schema(self) -> dict[str, Any] | None:
        return json_schema_of(self.output_schema)

    @property
    def secret_names(self) -> tuple[str, ...]:
        return tuple(s.name for s in self.secrets)

    @property
    def remote_mcp_servers(self) -> tuple[RemoteMcpServer, ...]:
        return tuple(m for m in self.mcp_servers if isinstance(m, RemoteMcpServer))

    @classmethod
    def from_yaml(cls, source: str | Path) -> Self:
        """Load from a YAML file path or YAML text. Unknown or duplicate keys are errors."""
        from harness_run.spec._yaml import load_yaml

        data, name = load_yaml(source)
        return cls.from_dict(data, source=name)

    def to_yaml(self, path: str | Path | None = None) -> str:
        """YAML of the non-default fields (``output_schema`` as its JSON Schema)."""
        from harness_run.spec._yaml import dump_yaml

        text = dump_yaml(self.to_dict(exclude_defaults=True))
        if path is not None:
            Path(path).write_text(text, encoding="utf-8")
        return text

    @classmethod
    def json_schema(cls) -> dict[str, Any]:
        """JSON Schema of spec files, for editor completion (``harness-run schema``)."""
        schema = cls.model_json_schema(mode="validation")
        schema["title"] = "harness-run AgentSpec"
        _add_shorthands(schema)
        return schema


def _either(prop: dict[str, Any], *alternatives: dict[str, Any]) -> dict[str, Any]:
    """``prop`` widened to also accept ``alternatives`` (title/description/default kept outside)."""
    meta = {k: prop.pop(k) for k in ("title", "description", "default") if k in prop}
    return {**meta, "anyOf": [prop, *alternatives]}


def _add_shorthands(schema: dict[str, Any]) -> None:
    """Let the schema accept the shorthands the loader accepts, so editors don't flag valid files."""
    props, defs = schema["properties"], schema["$defs"]
    props["timeout"] = _either(props["timeout"], {"type": "string", "pattern": _DURATION.pattern})
    props["system_prompt"] = _either(props["system_prompt"], {"type": "string"})
    defs["SystemPrompt"]["properties"]["append"] = {
        "type": "string",
        "description": "Same as text, mode inherit.",
    }
    props["network"] = _either(
        props["network"],
        {"enum": ["open", "none"]},
        {"type": "array", "items": {"type": "string"}, "minItems": 1},
    )
    props["secrets"]["items"] = _either(props["secrets"]["items"], {"type": "string"})
    for quantity in defs["Resources"]["properties"].values():
        quantity["type"] = ["string", "number"]


def _unique(names: list[str], what: str, field: str) -> None:
    seen: set[str] = set()
    for name in names:
        if name in seen:
            raise spec_fail(f"duplicate {what}: {name!r}", "give each entry a distinct name", field)
        seen.add(name)
