"""One normalized event model for every harness, and the result of a turn.

``async for event in run:`` yields :data:`AgentEvent`: a union of small frozen models,
discriminated by ``type``. In the order a turn usually produces them:

- ``user`` (:class:`UserEvent`): the turn's prompt, or a message steered into the running turn;
- ``setup`` (:class:`SetupEvent`): a workspace step before the harness starts (clone, skills …);
- ``started`` (:class:`StartedEvent`): the harness is up — its model, tools, MCP servers, session id;
- ``message`` (:class:`MessageEvent`): assistant text;
- ``thinking`` (:class:`ThinkingEvent`): reasoning text, where the harness shows it;
- ``tool_use`` (:class:`ToolUseEvent`): the agent calls a tool;
- ``tool_result`` (:class:`ToolResultEvent`): what the tool returned;
- ``approval_request`` / ``approval_decision`` (:class:`ApprovalRequestEvent`,
  :class:`ApprovalDecisionEvent`): a tool call waits for a person (``spec.approvals``), and the
  decision; ``question`` / ``question_answer``: the agent asks the user, and the answer;
- ``retry`` (:class:`RetryEvent`): a model request failed and the harness tries again;
- ``warning`` (:class:`WarningEvent`): the harness reported a problem; the turn goes on;
- ``cost_unknown`` (:class:`CostUnknownEvent`): no price for the model, ``cost_usd`` will be None;
- ``error`` (:class:`ErrorEvent`): the model API or the harness failed;
- ``result`` (:class:`ResultEvent`): always the last event of a turn, with its :class:`RunResult`.

``setup``, ``started``, ``retry``, ``warning`` and ``cost_unknown`` are notices about the run
rather than the conversation; they share the base class :class:`StatusEvent`, so
``isinstance(event, StatusEvent)`` picks them all. Match on the classes::

    async for event in run:
        match event:
            case MessageEvent(text=text):
                print(text)
            case ToolUseEvent(name=name, input=args):
                print("tool", name, args)
            case StartedEvent(model=model, tools=tools):
                print("running", model, "with", tools)
            case ResultEvent(result=result):
                print(result.cost_usd)

Every event has ``seq`` (its position in the turn), ``turn``, ``ts`` (Unix time) and ``raw``: the
harness's own output line, kept for debugging only — every contract field is a typed field, never
something to dig out of ``raw``. Two fields are free-form on purpose: :attr:`ToolUseEvent.input`
(a tool's arguments follow that tool's own schema) and :attr:`RunResult.structured_output` (the
caller's output schema). Secret values are redacted before an event is emitted or stored.

:func:`parse_event` turns the stored/wire form (``event.model_dump(mode="json")`` or its JSON text)
back into the same typed event; it also reads the ``type: "status"`` events of earlier versions.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import cache
from typing import Annotated, Any, Literal, cast, get_args

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, TypeAdapter

__all__ = [
    "EVENT_TYPES",
    "STOP_REASONS",
    "AgentEvent",
    "ApprovalDecisionEvent",
    "ApprovalRequestEvent",
    "CostUnknownEvent",
    "DeltaEvent",
    "ErrorEvent",
    "McpServerInfo",
    "MessageEvent",
    "QuestionAnswerEvent",
    "QuestionEvent",
    "ResourceUsage",
    "ResultEvent",
    "RetryEvent",
    "RunResult",
    "SetupEvent",
    "StartedEvent",
    "StatusEvent",
    "StopReason",
    "ThinkingEvent",
    "ToolResultEvent",
    "ToolUseEvent",
    "Usage",
    "UserEvent",
    "WarningEvent",
    "parse_event",
]

StopReason = Literal[
    "completed",  # the agent finished its answer
    "max_turns",  # the spec's/turn's max_turns was reached
    "max_budget",  # max_budget_usd was reached
    "error",  # the model API or the harness failed
    "interrupted",  # session.interrupt()
    "cancelled",  # the awaiting task was cancelled
    "timeout",  # the turn ran longer than its timeout
]
STOP_REASONS: tuple[str, ...] = get_args(StopReason)


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)


class Usage(_Frozen):
    """Token usage with the same keys on every harness (0 where the harness reports none)."""

    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    reasoning_tokens: int = 0

    def __add__(self, other: Usage) -> Usage:
        return Usage(**{k: getattr(self, k) + getattr(other, k) for k in Usage.model_fields})

    # read-only mapping access too: usage["input_tokens"], dict(usage), usage.keys()
    def __getitem__(self, key: str) -> int:
        if key not in Usage.model_fields:
            raise KeyError(key)
        return int(getattr(self, key))

    def keys(self) -> list[str]:
        return list(Usage.model_fields)

    def items(self) -> list[tuple[str, int]]:
        return [(k, self[k]) for k in Usage.model_fields]

    def get(self, key: str, default: int | None = None) -> int | None:
        return self[key] if key in Usage.model_fields else default

    @property
    def total_tokens(self) -> int:
        return self.input_tokens + self.output_tokens + self.cache_read_tokens + self.cache_write_tokens


class ResourceUsage(_Frozen):
    """What the harness process used during the turn (read from ``/proc`` just before it ended;
    ``None`` on the result where it could not be read, e.g. a CLI that crashed)."""

    cpu_seconds: float = 0.0
    """User + system CPU of the harness CLI and the commands it ran and waited for."""
    peak_memory_mb: float = 0.0
    """Peak resident memory of the harness CLI process."""


class RunResult(_Frozen):
    """What a turn produced. ``cost_usd`` is the harness's figure, else priced from a table, else
    ``None`` — never a made-up 0. ``structured_output`` is validated into the output schema's
    pydantic model when the schema was given as one."""

    text: str = ""
    structured_output: Any = None
    is_error: bool = False
    error: str | None = None
    stop_reason: StopReason = "completed"
    num_turns: int = 0
    cost_usd: float | None = None
    usage: Usage = Field(default_factory=Usage)
    session_id: str = ""
    turn: int = 0
    duration_s: float = 0.0
    harness: str = ""
    model: str = ""
    native_session_id: str | None = None
    resources: ResourceUsage | None = None
    commit_sha: str | None = None
    """The commit of the agent's work made after this turn (``git.commit="after_turn"``)."""
    pushed_ref: str | None = None
    """The remote ref that commit was pushed to (``git.push``), e.g. ``refs/heads/feat/auth``."""


class _Event(_Frozen):
    seq: int = 0
    turn: int = 0
    ts: float = 0.0
    raw: dict[str, Any] | None = Field(default=None, repr=False)
    """The harness's own output line (a JSON object), for debugging only."""


# --- the conversation ------------------------------------------------------------------------------


class UserEvent(_Event):
    """A user message: the turn's prompt or a message steered into it while it ran."""

    type: Literal["user"] = "user"
    text: str
    message_id: str | None = None
    """The caller's id for this message (``session.send(..., message_id=)``): a message is delivered
    once per id."""


class MessageEvent(_Event):
    """Assistant text."""

    type: Literal["message"] = "message"
    text: str
    message_id: str | None = None
    """The harness's id for this text (Claude Code: its model response; Codex, OpenCode: their item)."""


class DeltaEvent(_Event):
    """A piece of assistant text as the model streams it, before the whole :class:`MessageEvent`.

    Live only: deltas reach the caller's iterator and live subscribers (the server's SSE, the
    dashboard, ``harness-run chat``) but are not stored in history; the ``message`` event that
    follows carries the whole text. Their ``seq`` is that of the last stored event before them.
    Which harnesses emit them is listed in the Harnesses page."""

    type: Literal["delta"] = "delta"
    text: str
    """The new text (HarnessBox's ``event.delta``)."""
    message_id: str | None = None
    """The message the text belongs to, where the harness says."""

    @property
    def delta(self) -> str:
        """The new text, by HarnessBox's name."""
        return self.text


class ThinkingEvent(_Event):
    """Reasoning text, where the harness and the model show it."""

    type: Literal["thinking"] = "thinking"
    text: str


class ToolUseEvent(_Event):
    """The agent calls a tool. Tool names are the harness's own (``Bash``, ``shell`` …); MCP tools
    are ``mcp__<server>__<tool>`` on every harness."""

    type: Literal["tool_use"] = "tool_use"
    tool_use_id: str
    name: str
    input: dict[str, Any] = Field(default_factory=dict[str, Any])
    """The tool's arguments. Free-form on purpose: their shape is the tool's own input schema, which
    only the harness and the tool know."""


class ToolResultEvent(_Event):
    """What a tool returned (``tool_use_id`` names its :class:`ToolUseEvent`)."""

    type: Literal["tool_result"] = "tool_result"
    tool_use_id: str
    content: str = ""
    is_error: bool = False


# --- a person in the loop (``spec.approvals``) ----------------------------------------------------


class ApprovalRequestEvent(_Event):
    """A tool call waits for a person: ``session.approve(request_id)`` or ``deny(request_id,
    reason=)``, from any process, before ``expires_at`` (Unix time; then it is denied)."""

    type: Literal["approval_request"] = "approval_request"
    request_id: str
    tool: str
    """The harness's tool name (``Bash``, ``shell``, ``Write`` …)."""
    command: str | None = None
    """The shell command, for a shell call."""
    input: dict[str, Any] = Field(default_factory=dict[str, Any])
    """The tool's arguments (free-form, as in :class:`ToolUseEvent`)."""
    expires_at: float
    path: str | None = None
    """The file, for a file write or edit."""
    diff: str | None = None
    """For an edit: a unified diff of the change, where it is cheap to make."""


class ApprovalDecisionEvent(_Event):
    """The decision on an :class:`ApprovalRequestEvent`: ``by="client"`` (a person), or
    ``by="timeout"`` (nobody decided in time, or the approval path failed: denied)."""

    type: Literal["approval_decision"] = "approval_decision"
    request_id: str
    decision: Literal["allow", "deny"]
    by: Literal["client", "timeout"]
    reason: str | None = None
    key_id: str | None = None
    """The deciding API key's id (decisions made through a team server)."""


class QuestionEvent(_Event):
    """The agent asks the user (Claude Code's ``AskUserQuestion``): answer with
    ``run.answer(request_id, text)`` before ``expires_at``."""

    type: Literal["question"] = "question"
    request_id: str
    question: str
    options: list[str] = Field(default_factory=list[str])
    expires_at: float


class QuestionAnswerEvent(_Event):
    """The answer to a :class:`QuestionEvent` (``answer`` None: nobody answered in time)."""

    type: Literal["question_answer"] = "question_answer"
    request_id: str
    answer: str | None = None
    by: Literal["client", "timeout"]
    key_id: str | None = None


class ErrorEvent(_Event):
    """The model API or the harness failed (the turn's result says whether the turn ended)."""

    type: Literal["error"] = "error"
    message: str


class ResultEvent(_Event):
    """The last event of every turn."""

    type: Literal["result"] = "result"
    result: RunResult


# --- notices about the run -------------------------------------------------------------------------


class StatusEvent(_Event):
    """Base class of the notices about the run rather than the conversation: :class:`SetupEvent`,
    :class:`StartedEvent`, :class:`RetryEvent`, :class:`WarningEvent`, :class:`CostUnknownEvent`.
    Not an event type itself; use it with ``isinstance`` to pick (or skip) them all."""


class SetupEvent(StatusEvent):
    """A step of preparing the session's workspace, before the harness starts: restoring a
    checkpoint, cloning repos, staging skills, running ``setup_script``, installing packages."""

    type: Literal["setup"] = "setup"
    step: str
    """What is being done, for people (``cloning https://github.com/org/repo``)."""


class McpServerInfo(_Frozen):
    """An MCP server as the harness reports it at start."""

    name: str
    status: str | None = None
    """The connection state where the harness reports one (Claude Code: ``connected``, ``failed``,
    ``pending``, ``needs-auth``); None where it does not."""


class StartedEvent(StatusEvent):
    """The harness has started the turn (once per turn, before any model output)."""

    type: Literal["started"] = "started"
    harness: str
    """``claude-code``, ``codex`` or ``opencode``."""
    model: str
    """The model, as the harness reports it where it does (Claude Code), else the spec's."""
    native_session_id: str | None = None
    """The harness's own session id (Claude Code's session, Codex's thread, OpenCode's session)."""
    tools: tuple[str, ...] | None = None
    """The tools offered to the model, where the harness lists them (Claude Code); else None."""
    mcp_servers: tuple[McpServerInfo, ...] = ()
    skills: tuple[str, ...] | None = None
    """The skills the harness found, where it lists them (Claude Code); else None."""
    harness_version: str | None = None
    """The CLI's version, where it reports it."""
    permission_mode: str | None = None
    """The permission mode the harness runs in, where it reports it."""
    ignored: tuple[str, ...] = ()
    """Spec settings this harness accepts but cannot apply here (e.g. OpenCode's
    ``reasoning_effort`` on a provider without it); harmless, listed so nothing is silent."""


class RetryEvent(StatusEvent):
    """A model request failed and the harness retries it; the turn goes on."""

    type: Literal["retry"] = "retry"
    message: str
    attempt: int | None = None
    """Which retry this is (1 = the first), where the harness says."""
    max_attempts: int | None = None
    """How many retries the harness makes at most, where it says."""
    delay_s: float | None = None
    """Seconds until the retry, where the harness says."""
    http_status: int | None = None
    """The failed request's HTTP status, where the harness says."""


class WarningEvent(StatusEvent):
    """The harness reported a problem it recovers from (configuration, model metadata …)."""

    type: Literal["warning"] = "warning"
    message: str


class CostUnknownEvent(StatusEvent):
    """Neither the harness nor harness-run's price table can price the model: the result's
    ``cost_usd`` will be None (usage is still counted), and a budget cannot be enforced."""

    type: Literal["cost_unknown"] = "cost_unknown"
    model: str
    harness: str
    message: str


AgentEvent = Annotated[
    UserEvent
    | SetupEvent
    | StartedEvent
    | MessageEvent
    | DeltaEvent
    | ThinkingEvent
    | ToolUseEvent
    | ToolResultEvent
    | ApprovalRequestEvent
    | ApprovalDecisionEvent
    | QuestionEvent
    | QuestionAnswerEvent
    | RetryEvent
    | WarningEvent
    | CostUnknownEvent
    | ErrorEvent
    | ResultEvent,
    Field(discriminator="type"),
]
"""Any event of a turn; ``type`` tells which (see the module docstring)."""

EVENT_TYPES: tuple[type[_Event], ...] = (
    UserEvent,
    SetupEvent,
    StartedEvent,
    MessageEvent,
    DeltaEvent,
    ThinkingEvent,
    ToolUseEvent,
    ToolResultEvent,
    ApprovalRequestEvent,
    ApprovalDecisionEvent,
    QuestionEvent,
    QuestionAnswerEvent,
    RetryEvent,
    WarningEvent,
    CostUnknownEvent,
    ErrorEvent,
    ResultEvent,
)
"""Every class of :data:`AgentEvent`, for ``isinstance`` checks."""


@cache
def _adapter() -> TypeAdapter[AgentEvent]:
    return TypeAdapter(Annotated[AgentEvent, BeforeValidator(_upgrade)])


def parse_event(data: Mapping[str, Any] | str | bytes) -> AgentEvent:
    """Rebuild an event from its stored or wire form: ``event.model_dump(mode="json")``, or that as
    JSON text. Raises pydantic's ``ValidationError`` for anything else."""
    if isinstance(data, str | bytes):
        return _adapter().validate_json(data)
    return _adapter().validate_python(dict(data))


# --- the stored form of earlier versions -----------------------------------------------------------


def _upgrade(data: Any) -> Any:
    """A ``{"type": "status", "status": …, "detail": {…}}`` event (as stored and sent before each
    kind had its own type) as the typed event it stands for; anything else as it is."""
    old = _object(data)
    if old.get("type") != "status":
        return data
    detail = _object(old.get("detail"))
    new = {k: old[k] for k in ("seq", "turn", "ts", "raw") if k in old}
    message = str(detail.get("message") or detail.get("step") or detail.get("error") or old.get("status"))
    match old.get("status"):
        case "setup":
            new.update(type="setup", step=message)
        case "started":
            new.update(_legacy_started(detail))
        case "retry":
            new.update(
                type="retry",
                message=message,
                attempt=_opt_int(detail.get("attempt")),
                max_attempts=_opt_int(detail.get("max_retries")),
                delay_s=ms / 1000 if isinstance(ms := detail.get("retry_delay_ms"), int | float) else None,
                http_status=_opt_int(detail.get("error_status")),
            )
        case "cost_unknown":
            new.update(type="cost_unknown", model=str(detail.get("model", "")), harness="", message=message)
        case _:  # "warning" (no other kind was ever emitted)
            new.update(type="warning", message=message)
    return new


def _legacy_started(detail: dict[str, Any]) -> dict[str, Any]:
    servers = [  # Claude Code's {name, status} objects, or the others' names
        {"name": item} if isinstance(item, str) else _object(item)
        for item in _list(detail.get("mcp_servers"))
    ]
    if "claude_code_version" in detail:
        harness = "claude-code"
    elif "thread_id" in detail:
        harness = "codex"
    else:
        harness = "opencode" if "ignored" in detail else ""
    return {
        "type": "started",
        "harness": harness,
        "model": str(detail.get("model") or ""),
        "native_session_id": detail.get("thread_id") or detail.get("session_id"),
        "tools": detail.get("tools"),
        "mcp_servers": [{k: v for k, v in s.items() if k in ("name", "status")} for s in servers],
        "skills": detail.get("skills"),
        "harness_version": detail.get("claude_code_version"),
        "permission_mode": detail.get("permissionMode"),
        "ignored": detail.get("ignored") or [],
    }


def _object(value: Any) -> dict[str, Any]:
    return cast(dict[str, Any], value) if isinstance(value, dict) else {}


def _list(value: Any) -> list[Any]:
    return cast(list[Any], value) if isinstance(value, list) else []


def _opt_int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None
