"""``SessionConfig`` and ``TurnConfig``: sparse overlays stacked spec <- session <- turn.

Only fields that were explicitly given override (``None`` given explicitly clears a limit such as
``max_turns``; for a field the spec always has, like ``model``, ``None`` inherits); everything else
is inherited. Deploy-only fields (name, packages, skills, images, …) cannot be
overlaid: they are baked into the image, so changing them means deploying a new spec version.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar, Self, cast

from pydantic import Field, model_validator

from harness_run.errors import SpecError, SpecIssue
from harness_run.spec._agent import AgentSpec, Harness, PermissionMode, ReasoningEffort
from harness_run.spec._approvals import ApprovalPolicy
from harness_run.spec._base import SpecModel, spec_fail
from harness_run.spec._git import GitOptions
from harness_run.spec._schema import OutputSchema
from harness_run.spec._security import SecurityPolicy
from harness_run.spec._types import Duration, GitRef, ModelBaseUrl, ModelId, OutputSchemaField, ToolName
from harness_run.spec._values import SystemPrompt
from harness_run.spec._workspace import WorkspaceOptions

__all__ = ["DEPLOY_ONLY_FIELDS", "SessionConfig", "TurnConfig", "effective_spec"]

DEPLOY_ONLY_FIELDS: frozenset[str] = frozenset(
    {
        "name",
        "extra_harnesses",
        "skills",
        "repos",
        "mcp_servers",
        "packages",
        "system_packages",
        "secrets",
        "env",
        "checkpoint",
        "resources",
        "network",
        "setup_script",
    }
)


# Spec fields that may be None (limits, schema, …): an explicit None in an overlay clears them. For the
# others (model, harness, prompt, tools, timeout …) an explicit None means "inherit", like leaving it out.
_CLEARABLE: frozenset[str] = frozenset(n for n, f in AgentSpec.model_fields.items() if f.default is None)
_SESSION_ONLY: frozenset[str] = frozenset({"branch", "base_branch", "workspace"})
"""Session fields that are not spec fields: the runtime reads them from ``session.config``."""


class _Overlay(SpecModel):
    model: ModelId | None = None
    system_prompt: SystemPrompt | None = None
    allowed_tools: tuple[ToolName, ...] | None = None
    disallowed_tools: tuple[ToolName, ...] | None = None
    permission_mode: PermissionMode | None = None
    max_turns: int | None = Field(default=None, gt=0, strict=True)
    max_budget_usd: float | None = Field(default=None, gt=0, allow_inf_nan=False, strict=True)
    reasoning_effort: ReasoningEffort | None = None
    output_schema: OutputSchemaField = None
    timeout: Duration | None = None
    model_base_url: ModelBaseUrl | None = None
    git: GitOptions | None = None
    approvals: ApprovalPolicy | None = None
    """Replaces the spec's approval policy (whole) for this session or turn; an explicit None
    clears it (a team server lets overlays only add approvals)."""

    _kind: ClassVar[str] = "config"

    @model_validator(mode="before")
    @classmethod
    def _deploy_only(cls, data: Any) -> Any:
        if isinstance(data, Mapping):
            data = cast("Mapping[Any, Any]", data)
            if cls._kind == "turn" and "harness" in data:
                raise spec_fail(
                    "the harness cannot change within a session",
                    "start a new session with SessionConfig(harness=...)",
                    field="harness",
                )
            for key in sorted(str(k) for k in data if k in DEPLOY_ONLY_FIELDS):
                raise spec_fail(
                    f"cannot be changed per {cls._kind}: it is part of the deployed image",
                    "deploy a new spec version with the change",
                    field=key,
                )
        return data

    def to_dict(self, *, exclude_defaults: bool = False) -> dict[str, Any]:
        """Only the explicitly set fields: the overlay as given."""
        return self.model_dump(mode="json", include=set(self.model_fields_set))


class SessionConfig(_Overlay):
    """Per-session overlay, bound at ``engine.start_session(config=...)``.

    ``harness`` picks one of the harnesses baked into the engine's image.
    """

    _kind: ClassVar[str] = "session"
    harness: Harness | None = None
    security_policy: SecurityPolicy | None = None
    """Replaces the spec's policy (whole) for this session."""
    branch: GitRef | None = None
    """The branch the session works on (in the spec's first repo): checked out, or created from
    ``base_branch`` when the remote does not have it. Also ``engine.start_session(branch=...)``."""
    base_branch: GitRef | None = None
    workspace: WorkspaceOptions | None = None
    """Where the session works: its own workspace (default), one shared by the engine's sessions,
    or a host directory in place (:class:`WorkspaceOptions`)."""

    @model_validator(mode="after")
    def _base_needs_branch(self) -> Self:
        if self.base_branch is not None and self.branch is None:
            raise spec_fail(
                "is set without a branch", "give branch= too (created from it)", field="base_branch"
            )
        return self

    if TYPE_CHECKING:  # what type checkers show users: the shorthands and any sequence are accepted

        def __init__(
            self,
            *,
            model: str | None = None,
            system_prompt: SystemPrompt | str | None = None,
            allowed_tools: Sequence[str] | None = None,
            disallowed_tools: Sequence[str] | None = None,
            permission_mode: PermissionMode | None = None,
            max_turns: int | None = None,
            max_budget_usd: float | None = None,
            reasoning_effort: ReasoningEffort | None = None,
            output_schema: OutputSchema | None = None,
            timeout: float | str | None = None,
            model_base_url: str | None = None,
            git: GitOptions | Mapping[str, Any] | None = None,
            approvals: ApprovalPolicy | Mapping[str, Any] | None = None,
            harness: Harness | None = None,
            security_policy: SecurityPolicy | Mapping[str, Any] | None = None,
            branch: str | None = None,
            base_branch: str | None = None,
            workspace: WorkspaceOptions | Mapping[str, Any] | None = None,
        ) -> None: ...


class TurnConfig(_Overlay):
    """Per-turn overlay for ``session.run(..., config=...)`` / ``send``."""

    _kind: ClassVar[str] = "turn"

    if TYPE_CHECKING:

        def __init__(
            self,
            *,
            model: str | None = None,
            system_prompt: SystemPrompt | str | None = None,
            allowed_tools: Sequence[str] | None = None,
            disallowed_tools: Sequence[str] | None = None,
            permission_mode: PermissionMode | None = None,
            max_turns: int | None = None,
            max_budget_usd: float | None = None,
            reasoning_effort: ReasoningEffort | None = None,
            output_schema: OutputSchema | None = None,
            timeout: float | str | None = None,
            model_base_url: str | None = None,
            git: GitOptions | Mapping[str, Any] | None = None,
            approvals: ApprovalPolicy | Mapping[str, Any] | None = None,
        ) -> None: ...


def effective_spec(spec: AgentSpec, *overlays: _Overlay | None) -> AgentSpec:
    """Apply overlays in order (session, then turn) and re-check the result as a whole."""
    merged: dict[str, Any] = {}
    for overlay in overlays:
        if overlay is not None:
            merged.update(
                (name, value)
                for name, value in overlay.set_fields().items()
                if (value is not None or name in _CLEARABLE) and name not in _SESSION_ONLY
            )
    if not merged:
        return spec
    harness = merged.get("harness")
    if harness is not None and harness not in spec.harnesses:
        raise SpecError(
            [
                SpecIssue(
                    "harness",
                    f"{harness!r} is not baked into engine {spec.name!r} (it has {list(spec.harnesses)})",
                    f"deploy the spec with extra_harnesses=[{harness!r}]",
                )
            ]
        )
    if harness is not None and harness != spec.harness:
        merged["extra_harnesses"] = tuple(h for h in spec.harnesses if h != harness)
    data = {name: getattr(spec, name) for name in AgentSpec.model_fields}
    data.update(merged)
    try:
        return AgentSpec(**data)
    except SpecError as exc:
        issues = list(exc.issues)
        if harness is not None and harness != spec.harness and "model" not in merged:
            issues = [
                SpecIssue(
                    i.path,
                    i.message,
                    f"{i.fix}; the engine's model is for {spec.harness}: pick one for {harness} too, "
                    f"e.g. SessionConfig(harness={harness!r}, model=...)".lstrip("; "),
                )
                if i.path == "model"
                else i
                for i in issues
            ]
        raise SpecError(issues, source="spec + session/turn config") from None
