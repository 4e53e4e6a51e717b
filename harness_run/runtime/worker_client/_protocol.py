"""The worker's wire protocol: JSON bodies of ``python -m harness_run.worker`` (pydantic v2).

Routes (every one but ``GET /healthz`` needs ``Authorization: Bearer <token>``):

- ``GET /healthz`` -> :class:`Health`
- ``POST /v1/turns`` :class:`TurnRequest` -> :class:`TurnInfo` (idempotent by ``turn_id``)
- ``GET /v1/turns/{turn_id}`` -> :class:`TurnInfo`
- ``GET /v1/turns/{turn_id}/events`` -> SSE (``id: <turn>:<seq>``, ``event: <type>``, ``data: <json>``);
  resume with ``Last-Event-ID`` or ``?after=`` (an event id, or a bare seq); ends after the ``result``
  event
- ``POST /v1/turns/{turn_id}/steer`` :class:`SteerRequest` -> :class:`SteerResponse`
- ``POST /v1/turns/{turn_id}/interrupt`` -> :class:`InterruptResponse`
- ``POST /v1/exec`` :class:`ExecRequest` -> :class:`ExecResponse`
- ``POST /v1/deliver`` :class:`DeliverRequest` -> :class:`DeliverResponse` (``git.commit="on_close"``:
  commit and push a session's work now)

Errors are :class:`ErrorBody` with the HTTP status, as the team server's (the HTTP kit,
:mod:`harness_run.web`): 422 a body that does not validate (``field`` names it), 400 a request that
cannot be carried out, 401 auth, 404 unknown turn/session, 409 ``session_busy``, 413 a body over
16 MiB, 500 anything else (message redacted).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from harness_run.web import ErrorBody

__all__ = [
    "DeliverRequest",
    "DeliverResponse",
    "ErrorBody",
    "ExecRequest",
    "ExecResponse",
    "Health",
    "InterruptResponse",
    "SteerRequest",
    "SteerResponse",
    "TurnInfo",
    "TurnRequest",
    "TurnStatus",
]

TurnStatus = Literal["running", "completed", "failed"]


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid", defer_build=True)


class Health(_Body):
    status: Literal["ok"] = "ok"
    version: str
    digest: str | None = None
    busy: bool = False


class TurnRequest(_Body):
    """Start the next turn of a session whose record is already in the store."""

    turn_id: str = Field(min_length=1, max_length=200)
    session_id: str = Field(min_length=1, max_length=200)
    prompt: str = Field(min_length=1)
    secrets: dict[str, str] = Field(default_factory=dict[str, str])
    turn_config: dict[str, Any] | None = None
    turn: int | None = None
    """The turn number the client reserved; refused (409) when the session is elsewhere by now."""

    def __repr__(self) -> str:  # never show secret values
        return (
            f"TurnRequest(turn_id={self.turn_id!r}, session_id={self.session_id!r}, "
            f"secrets={sorted(self.secrets)})"
        )

    __str__ = __repr__


class TurnInfo(_Body):
    turn_id: str
    session_id: str
    turn: int
    status: TurnStatus


class SteerRequest(_Body):
    text: str = Field(min_length=1)
    message_id: str | None = None
    """Steers with the same id are delivered once (a client may retry safely)."""


class SteerResponse(_Body):
    delivered: bool


class InterruptResponse(_Body):
    interrupted: bool


class ExecRequest(_Body):
    session_id: str = Field(min_length=1)
    command: str = Field(min_length=1)
    timeout: float = Field(default=120.0, gt=0, le=3600)
    secrets: dict[str, str] = Field(default_factory=dict[str, str])

    def __repr__(self) -> str:
        return f"ExecRequest(session_id={self.session_id!r}, secrets={sorted(self.secrets)})"

    __str__ = __repr__


class ExecResponse(_Body):
    exit_code: int
    stdout: str
    stderr: str
    truncated: bool = False


class DeliverRequest(_Body):
    """Commit (and push) a session's work now: its last turn's secrets and turn config."""

    session_id: str = Field(min_length=1)
    secrets: dict[str, str] = Field(default_factory=dict[str, str])
    turn_config: dict[str, Any] | None = None

    def __repr__(self) -> str:
        return f"DeliverRequest(session_id={self.session_id!r}, secrets={sorted(self.secrets)})"

    __str__ = __repr__


class DeliverResponse(_Body):
    commit_sha: str | None = None
    pushed_ref: str | None = None
    error: str | None = None
    """Why the work was not (all) committed or pushed (what was committed stays in the workspace)."""
