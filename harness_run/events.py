"""One normalized event model for every harness, and the result of a turn.

Events are a discriminated union on ``type``. Each keeps the harness's raw line in ``raw`` for
debugging only; no contract data lives there. Secret values are redacted before an event is
emitted or stored.
"""

from __future__ import annotations

from functools import cache
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter

__all__ = [
    "STOP_REASONS",
    "AgentEvent",
    "ErrorEvent",
    "MessageEvent",
    "ResourceUsage",
    "ResultEvent",
    "RunResult",
    "StatusEvent",
    "StopReason",
    "ThinkingEvent",
    "ToolResultEvent",
    "ToolUseEvent",
    "Usage",
    "UserEvent",
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
STOP_REASONS: tuple[str, ...] = StopReason.__args__  # type: ignore[attr-defined]


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


class _Event(_Frozen):
    seq: int = 0
    turn: int = 0
    ts: float = 0.0
    raw: dict[str, Any] | None = Field(default=None, repr=False)


class StatusEvent(_Event):
    """Lifecycle: ``started`` (harness init: model, tools), ``setup`` steps, ``retry`` …"""

    type: Literal["status"] = "status"
    status: str
    detail: dict[str, Any] = Field(default_factory=dict[str, Any])


class UserEvent(_Event):
    """A user message: the turn's prompt or a steer sent while it ran."""

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


class ThinkingEvent(_Event):
    type: Literal["thinking"] = "thinking"
    text: str


class ToolUseEvent(_Event):
    type: Literal["tool_use"] = "tool_use"
    tool_use_id: str
    name: str
    input: dict[str, Any] = Field(default_factory=dict[str, Any])


class ToolResultEvent(_Event):
    type: Literal["tool_result"] = "tool_result"
    tool_use_id: str
    content: str = ""
    is_error: bool = False


class ErrorEvent(_Event):
    type: Literal["error"] = "error"
    message: str


class ResultEvent(_Event):
    """The last event of every turn."""

    type: Literal["result"] = "result"
    result: RunResult


AgentEvent = Annotated[
    StatusEvent
    | UserEvent
    | MessageEvent
    | ThinkingEvent
    | ToolUseEvent
    | ToolResultEvent
    | ErrorEvent
    | ResultEvent,
    Field(discriminator="type"),
]


@cache
def _adapter() -> TypeAdapter[AgentEvent]:
    return TypeAdapter(AgentEvent)


def parse_event(data: dict[str, Any]) -> AgentEvent:
    """Rebuild an event from its stored JSON form."""
    return _adapter().validate_python(data)
