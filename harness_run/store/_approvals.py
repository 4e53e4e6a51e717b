"""``ApprovalRecord``: a tool call (or a question) waiting for a person, kept in the history store.

A turn's guard writes the pending record (:meth:`HistoryStore.put_approval`), any process decides it
(:meth:`decide_approval`: the first decision wins, compare-and-set), and the waiting guard reads
the decision back. :func:`decided` is the one rule both stores apply.
"""

from __future__ import annotations

import time
from typing import Any, Literal, Protocol, runtime_checkable

from pydantic import Field

from harness_run.errors import ApprovalNotFoundError, UsageError
from harness_run.store._records import _Record  # pyright: ignore[reportPrivateUsage]

__all__ = [
    "ApprovalDecision",
    "ApprovalKind",
    "ApprovalRecord",
    "ApprovalStore",
    "DecidedBy",
    "decided",
    "not_found",
]

ApprovalKind = Literal["approval", "question"]
ApprovalDecision = Literal["allow", "deny"]
DecidedBy = Literal["client", "timeout"]


class ApprovalRecord(_Record):
    """One request: pending while ``by`` is None (and ``expires_at`` is ahead), else decided.

    ``kind="approval"``: a tool call (``tool``, ``command`` for a shell call, ``input``, ``path`` and
    ``diff`` for a file write) decided ``allow``/``deny``; ``kind="question"``: the agent's
    ``question`` (with ``options``) answered with ``answer`` (None: nobody answered)."""

    session_id: str
    turn: int
    request_id: str
    kind: ApprovalKind = "approval"
    tool: str = ""
    command: str | None = None
    input: dict[str, Any] = Field(default_factory=dict[str, Any])
    path: str | None = None
    diff: str | None = None
    question: str | None = None
    options: list[str] = Field(default_factory=list[str])
    created_at: float
    expires_at: float
    decision: ApprovalDecision | None = None
    answer: str | None = None
    by: DecidedBy | None = None
    reason: str | None = None
    key_id: str | None = None
    decided_at: float | None = None

    @property
    def pending(self) -> bool:
        """Not decided yet (an expired one is still pending until its guard or a reader settles it)."""
        return self.by is None


def not_found(session_id: str, request_id: str) -> ApprovalNotFoundError:
    return ApprovalNotFoundError(
        f"session {session_id} has no approval request {request_id!r}; list the pending ones with "
        "session.pending_approvals()"
    )


def decided(
    current: ApprovalRecord,
    *,
    decision: ApprovalDecision | None,
    answer: str | None,
    by: DecidedBy,
    reason: str | None,
    key_id: str | None,
    now: float | None = None,
) -> ApprovalRecord:
    """``current`` with the decision applied, or UsageError when it cannot take one: decided already,
    expired (for a client's decision), or a decision of the wrong kind."""
    now = time.time() if now is None else now
    what = f"approval request {current.request_id} of session {current.session_id}"
    if current.by is not None:
        outcome = current.decision or (
            f"answered {current.answer!r}" if current.answer is not None else "unanswered"
        )
        raise UsageError(
            f"{what} was already decided ({outcome}, by {current.by}); a request takes one decision"
        )
    if by == "client" and now >= current.expires_at:
        raise UsageError(
            f"{what} expired at {time.strftime('%H:%M:%S', time.localtime(current.expires_at))} "
            "(the tool call is denied); the agent may ask again"
        )
    if current.kind == "question":
        if decision is not None and by == "client":
            raise UsageError(f"{what} is a question: answer it with session.answer(request_id, text)")
        update: dict[str, Any] = {"answer": answer, "decision": decision}
    else:
        if decision is None:
            raise UsageError(f"{what} needs allow or deny (session.approve / session.deny), not an answer")
        update = {"decision": decision}
    update.update(by=by, reason=reason, key_id=key_id, decided_at=now)
    return current.model_copy(update=update)


@runtime_checkable
class ApprovalStore(Protocol):
    """The approval methods of a history store (:class:`~harness_run.store.SqliteStore`,
    :class:`~harness_run.store.GcsStore`).

    Contract: ``put_approval`` writes a record (the turn's guard, once per request);
    ``list_approvals`` returns a session's requests by creation time (``pending``: those not decided
    yet); ``get_approval`` returns one or None; ``decide_approval`` applies the first decision
    only (compare-and-set across every client) and returns the decided record; a second decision,
    or a client's decision after ``expires_at``, raises ``UsageError`` naming the state; an unknown
    id raises ``ApprovalNotFoundError``."""

    def put_approval(self, record: ApprovalRecord) -> None: ...

    def get_approval(self, session_id: str, request_id: str) -> ApprovalRecord | None: ...

    def list_approvals(self, session_id: str, *, pending: bool = False) -> list[ApprovalRecord]: ...

    def decide_approval(
        self,
        session_id: str,
        request_id: str,
        *,
        decision: ApprovalDecision | None = None,
        answer: str | None = None,
        by: DecidedBy,
        reason: str | None = None,
        key_id: str | None = None,
    ) -> ApprovalRecord: ...
