"""The team server's wire protocol (``harness-run serve``): JSON bodies as pydantic v2 models.

The server (``harness_run.server``) and its thin client (:class:`ServerEngine`) share these models;
the OpenAPI document is generated from them. Every route but ``GET /healthz`` and
``GET /openapi.json`` needs ``Authorization: Bearer <api key>``. Errors are :class:`ErrorBody`:
401 no or a wrong key, 404 unknown engine or session, 409 a turn is running, 422 a body or config
that does not validate (``field`` names it).

Server-sent events carry one :data:`~harness_run.events.AgentEvent` each: ``id: <turn>:<seq>``,
``event: <type>``, ``data: <the event's JSON>``; resume with ``Last-Event-ID`` or ``?after=``.
"""

from __future__ import annotations

from typing import Any, Literal, Self
from uuid import UUID

from pydantic import BaseModel, ConfigDict, Field, model_validator

from harness_run.runtime.worker_client import ErrorBody, SteerRequest
from harness_run.runtime.worker_client import ExecResponse as ExecOutput
from harness_run.runtime.worker_client import InterruptResponse as Interrupted
from harness_run.runtime.worker_client import SteerResponse as Steered
from harness_run.store import ApprovalRecord, EngineRecord, SessionRecord, TurnRecord
from harness_run.web import event_id, parse_event_id

__all__ = [
    "ApprovalList",
    "CreateSession",
    "Decision",
    "EngineList",
    "ErrorBody",
    "ExecOutput",
    "ExecRequest",
    "Health",
    "Interrupted",
    "KeyInfo",
    "SessionList",
    "SteerRequest",
    "Steered",
    "TurnList",
    "TurnRequest",
    "TurnStarted",
    "WorkspaceRequest",
    "event_id",
    "parse_event_id",
]


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid", defer_build=True)


class Health(_Body):
    """``GET /healthz``: the status only (no key needed, so it names nothing served)."""

    status: str = "ok"


class KeyInfo(_Body):
    """``GET /v1/keys/me``: the caller's own key (never the key itself) and its spend."""

    key_id: str
    name: str
    scopes: list[str]
    budget_usd: float | None = None
    budget_per: str | None = None
    spent_usd: float = 0.0
    """Spent in the current budget period (this day or month, UTC); all time without a budget."""
    period_start: float | None = None
    server_version: str


class CreateSession(_Body):
    config: dict[str, Any] | None = None
    """A ``SessionConfig`` as a dict: overlays the spec for every turn of the session."""
    session_id: UUID | None = None
    """A UUID of your choosing (default: a new one)."""


class WorkspaceRequest(CreateSession):
    """HarnessBox's ``POST /v1/workspaces``: a session of ``engine`` (optional when one is served)."""

    engine: str | None = None


class TurnRequest(_Body):
    prompt: str = Field(min_length=1)
    secrets: dict[str, str] = Field(default_factory=dict[str, str])
    """This run's secret values by name: used for the turn, never stored or logged."""
    config: dict[str, Any] | None = None
    """A ``TurnConfig`` as a dict, for this turn only."""
    message_id: str | None = None
    """Identifies the prompt: a retried id returns that turn instead of starting another."""


class TurnStarted(_Body):
    session_id: str
    turn: int
    message_id: str


class ExecRequest(_Body):
    command: str = Field(min_length=1)
    secrets: dict[str, str] = Field(default_factory=dict[str, str])
    timeout: float = Field(default=120.0, gt=0)
    max_output: int = Field(default=1024 * 1024, ge=0)


class SessionList(_Body):
    sessions: list[SessionRecord]
    approvals: dict[str, int] = Field(default_factory=dict[str, int])
    """Session id -> how many of its tool calls or questions wait for a person (listed sessions
    with none are left out): the dashboard shows "waiting for approval"."""


class ApprovalList(_Body):
    """``GET /v1/sessions/{id}/approvals``: requests of the session's current turn (``?turn=N`` one
    turn, ``?turn=all`` every turn), oldest first; ``?pending=1`` only those still waiting."""

    approvals: list[ApprovalRecord]


class Decision(_Body):
    """``POST /v1/sessions/{id}/approvals/{request_id}``: ``{"decision": "allow"}``,
    ``{"decision": "deny", "reason": "not today"}`` (the reason reaches the model as the tool's
    error), or for a question ``{"answer": "..."}``. The first decision wins; the deciding key's id
    is recorded with it."""

    decision: Literal["allow", "deny"] | None = None
    reason: str | None = Field(default=None, max_length=4000)
    answer: str | None = Field(default=None, max_length=100_000)

    @model_validator(mode="after")
    def _one(self) -> Self:
        if (self.decision is None) == (self.answer is None):
            raise ValueError(
                'give "decision" ("allow" or "deny") for a tool call, or "answer" for a question'
            )
        if self.reason is not None and self.decision != "deny":
            raise ValueError('"reason" goes with "decision": "deny"')
        return self


class EngineList(_Body):
    engines: list[EngineRecord]


class TurnList(_Body):
    turns: list[TurnRecord]
