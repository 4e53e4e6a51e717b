"""``AgentSpec``: the declarative definition of an agent, compiled into an image and manifests."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal, Self

from pydantic import (
    AfterValidator,
    Field,
    SerializerFunctionWrapHandler,
    ValidationInfo,
    field_validator,
    model_serializer,
)

from harness_run.spec._approvals import ApprovalPolicy
from harness_run.spec._base import SpecModel, from_document, spec_fail
from harness_run.spec._checks import check_model_for_harness
from harness_run.spec._git import GitOptions
from harness_run.spec._schema import OutputSchema, json_schema_of
from harness_run.spec._security import SecurityPolicy
from harness_run.spec._types import (
    DURATION_PATTERN,
    AgentName,
    DebPackage,
    Duration,
    EnvSettings,
    ModelBaseUrl,
    ModelId,
    OutputSchemaField,
    PipRequirement,
    Text,
    ToolName,
)
from harness_run.spec._values import (
    GitRepo,
    GitSkill,
    LocalSkill,
    McpServerSpec,
    Network,
    RemoteMcpServer,
    RepoSpec,
    Resources,
    Secret,
    SkillSpec,
    StdioMcpServer,
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


def _sorted_unique(value: tuple[str, ...]) -> tuple[str, ...]:
    return tuple(sorted(set(value)))


class AgentSpec(SpecModel):
    """The definition of an agent: harness, model, prompt, skills, MCP servers, repos, packages,
    secret NAMES, limits and output schema. Frozen; every field but ``name``, ``harness`` and
    ``model`` has a default. Secret values never belong here: name them in ``secrets`` (or in
    ``auth`` / ``header_secrets`` / ``env_secrets``, which declare them automatically as required)
    and pass the values with each run.
    """

    # Field order matters: a field's validator sees the fields above it (``info.data``).
    name: AgentName = Field(description="Kubernetes-safe name (DNS label) of the agent / engine.")
    harness: Harness = Field(description="The agent CLI that runs turns.")
    model: ModelId = Field(description="Model id, e.g. 'claude-sonnet-4-6' or 'gpt-5.6-luna'.")
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
    packages: tuple[PipRequirement, ...] = Field(
        default=(), description="pip requirements for the agent's environment."
    )
    system_packages: Annotated[tuple[DebPackage, ...], AfterValidator(_sorted_unique)] = Field(
        default=(), description="Debian packages baked into the image."
    )
    secrets: tuple[Secret, ...] = Field(default=(), description="Secret NAMES a run must or may supply.")
    env: EnvSettings = Field(default_factory=dict[str, str], description="Non-secret environment.")
    allowed_tools: tuple[ToolName, ...] = ()
    disallowed_tools: tuple[ToolName, ...] = ()
    permission_mode: PermissionMode = "bypassPermissions"
    max_turns: int | None = Field(default=None, gt=0, strict=True)
    max_budget_usd: float | None = Field(default=None, gt=0, allow_inf_nan=False, strict=True)
    reasoning_effort: ReasoningEffort | None = None
    output_schema: OutputSchemaField = None
    checkpoint: bool = Field(
        default=False,
        description="Snapshot native session files and the "
        "workspace after every turn so any process or sandbox can resume.",
    )
    timeout: Duration = Field(default=1800.0, description="Seconds one turn may take.")
    resources: Resources = Field(default_factory=Resources)
    network: Network = Field(default_factory=Network)
    setup_script: Text | None = Field(default=None, description="Shell script run once per workspace.")
    model_base_url: ModelBaseUrl | None = Field(
        default=None, description="Model endpoint (gateway) URL; else the standard env variables."
    )
    git: GitOptions | None = Field(default=None, description="Commit/push the agent's work to its branch.")
    security_policy: SecurityPolicy = Field(
        default_factory=SecurityPolicy,
        description="Tools, shell commands and network the agent may not use; credential guards "
        "(on by default). Enforced by each harness before a tool runs.",
    )
    approvals: ApprovalPolicy | None = Field(
        default=None,
        description="Tool calls that wait for a person's decision (shell commands, tools, file "
        "writes); denied when nobody decides within timeout_s.",
    )

    if TYPE_CHECKING:  # what type checkers show users: the shorthands and any sequence are accepted

        def __init__(
            self,
            *,
            name: str,
            harness: Harness,
            model: str,
            extra_harnesses: Sequence[Harness] = (),
            system_prompt: SystemPrompt | str = ...,
            skills: Sequence[GitSkill | LocalSkill] = (),
            repos: Sequence[GitRepo] = (),
            mcp_servers: Sequence[StdioMcpServer | RemoteMcpServer] = (),
            packages: Sequence[str] = (),
            system_packages: Sequence[str] = (),
            secrets: Sequence[Secret | str] = (),
            env: Mapping[str, str] = ...,
            allowed_tools: Sequence[str] = (),
            disallowed_tools: Sequence[str] = (),
            permission_mode: PermissionMode = "bypassPermissions",
            max_turns: int | None = None,
            max_budget_usd: float | None = None,
            reasoning_effort: ReasoningEffort | None = None,
            output_schema: OutputSchema | None = None,
            checkpoint: bool = False,
            timeout: float | str = 1800.0,
            resources: Resources | Mapping[str, str | float] = ...,
            network: Network | Literal["open", "none"] | Sequence[str] = ...,
            setup_script: str | None = None,
            model_base_url: str | None = None,
            git: GitOptions | None = None,
            security_policy: SecurityPolicy | Mapping[str, Any] = ...,
            approvals: ApprovalPolicy | Mapping[str, Any] | None = None,
        ) -> None: ...

    @model_serializer(mode="wrap")
    def _drop_default_policy(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        """The default policy (and no approvals) is left out of the data, so specs that do not set
        one keep their engine digest."""
        data: dict[str, Any] = handler(self)
        if self.security_policy.is_default:
            data.pop("security_policy", None)
        if self.approvals is None:
            data.pop("approvals", None)
        return data

    # ---- checks that need other fields (the ones declared above them) ----------------------

    @field_validator("model")
    @classmethod
    def _model_fits_harness(cls, model: str, info: ValidationInfo) -> str:
        harness = info.data.get("harness")
        if isinstance(harness, str):
            check_model_for_harness(model, harness)
        return model

    @field_validator("extra_harnesses")
    @classmethod
    def _extra(cls, value: tuple[Harness, ...], info: ValidationInfo) -> tuple[Harness, ...]:
        """Sorted, without duplicates or the primary harness."""
        return tuple(sorted(set(value) - {info.data.get("harness")}))

    @field_validator("skills")
    @classmethod
    def _distinct_skills(cls, skills: tuple[GitSkill | LocalSkill, ...]) -> tuple[GitSkill | LocalSkill, ...]:
        _unique([s.staged_name for s in skills], "skill names (set name= to tell them apart)")
        return skills

    @field_validator("repos")
    @classmethod
    def _distinct_repos(cls, repos: tuple[GitRepo, ...]) -> tuple[GitRepo, ...]:
        _unique([r.dir_name for r in repos], "repository paths (set path= to tell them apart)")
        if len(repos) > 1 and any(r.dir_name == "." for r in repos):
            raise spec_fail(
                f"path='.' (the workspace itself is the checkout) is for a lone repository; "
                f"{len(repos)} are listed",
                "give every repository its own path=, or list only the one cloned into '.'",
            )
        return repos

    @field_validator("mcp_servers")
    @classmethod
    def _distinct_servers(
        cls, servers: tuple[StdioMcpServer | RemoteMcpServer, ...]
    ) -> tuple[StdioMcpServer | RemoteMcpServer, ...]:
        _unique([m.name for m in servers], "MCP server names")
        return servers

    @field_validator("secrets")
    @classmethod
    def _declare_referenced(cls, secrets: tuple[Secret, ...], info: ValidationInfo) -> tuple[Secret, ...]:
        """Secrets named by ``auth`` / ``header_secrets`` / ``env_secrets`` are declared (required)."""
        _unique([s.name for s in secrets], "secret names")
        repos: tuple[GitRepo, ...] = info.data.get("repos", ())
        servers: tuple[StdioMcpServer | RemoteMcpServer, ...] = info.data.get("mcp_servers", ())
        referenced = [r.auth for r in repos if r.auth]
        for server in servers:
            referenced.extend(server.secret_names())
        declared = {s.name for s in secrets}
        return (*secrets, *(Secret(name=n) for n in dict.fromkeys(referenced) if n not in declared))

    @field_validator("disallowed_tools")
    @classmethod
    def _tools_disjoint(cls, disallowed: tuple[str, ...], info: ValidationInfo) -> tuple[str, ...]:
        both = sorted(set(info.data.get("allowed_tools", ())) & set(disallowed))
        if both:
            raise spec_fail(
                f"tools {both} are both allowed and disallowed",
                "remove them from one of allowed_tools / disallowed_tools",
            )
        return disallowed

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
        """Load from a YAML (or JSON) file path or text. Unknown or duplicate keys are errors, and so
        are YAML anchors/aliases; the document may only name paths inside its own directory and
        network git URLs (see :func:`~harness_run.spec._base.from_document`)."""
        from harness_run.spec._yaml import load_yaml

        data, name = load_yaml(source)
        with from_document():
            return cls.from_dict(data, source=name)

    def to_yaml(self, path: str | Path | None = None) -> str:
        """YAML of the non-default fields (``output_schema`` as its JSON Schema), written to ``path``
        if given; ``from_yaml`` reads it back as this spec. Absolute local skill paths are written
        relative to ``path``; what a spec file cannot hold is refused (SpecError naming the field)."""
        from harness_run.spec._document import document_data
        from harness_run.spec._yaml import dump_yaml

        text = dump_yaml(document_data(self, self.skills, Path(path) if path is not None else None))
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
    props["timeout"] = _either(props["timeout"], {"type": "string", "pattern": DURATION_PATTERN})
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


def _unique(names: list[str], what: str) -> None:
    seen: set[str] = set()
    for name in names:
        if name in seen:
            raise spec_fail(f"duplicate {what}: {name!r}", "give each entry a distinct name")
        seen.add(name)
