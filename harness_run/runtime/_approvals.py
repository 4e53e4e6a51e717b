"""The session side of approvals: list what waits, decide it from any process, settle orphans.

A decision is a compare-and-set on the request's record in the history store (the first wins);
the turn's guard, in whichever process runs the turn, sees it (at once in this process through
:func:`~harness_run.security.wake`, else at its next read of the record).
"""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING, Any, Final

from harness_run.errors import UsageError
from harness_run.events import AgentEvent, ApprovalDecisionEvent, QuestionAnswerEvent
from harness_run.security import wake
from harness_run.store import ApprovalRecord, ApprovalStore

if TYPE_CHECKING:
    from harness_run.store import HistoryStore

__all__ = ["ORPHANED", "check_decision", "decide", "orphaned_decisions", "pending_approvals"]

ORPHANED: Final = "the turn's process ended"
"""The reason of a request whose turn ended without deciding it (its process was killed)."""
_GRACE: Final = 5.0
"""Seconds past ``expires_at`` after which a still-pending request is settled by a reader (its
guard would have denied it by then, unless its process is gone)."""


def _approvals(store: HistoryStore | Any) -> ApprovalStore:
    if not isinstance(store, ApprovalStore):
        raise UsageError(
            f"this session's history store ({type(store).__name__}) keeps no approval requests; "
            "use a local store (SQLite) or GCS, or a runtime that relays approvals"
        )
    return store


def pending_approvals(store: HistoryStore | Any, session_id: str) -> list[ApprovalRecord]:
    """The session's requests that wait for a decision now. A pending one whose turn has ended (its
    process died: the turn was stored as interrupted) is settled here as denied (:data:`ORPHANED`),
    and so is one long past its expiry — fail closed, and the store says so."""
    approvals = _approvals(store)
    pending = approvals.list_approvals(session_id, pending=True)
    if not pending:
        return []
    finished = {t.turn for t in store.list_turns(session_id) if t.result is not None}
    now = time.time()
    out: list[ApprovalRecord] = []
    for record in pending:
        if record.turn in finished:
            _settle(approvals, record, ORPHANED)
        elif now > record.expires_at + _GRACE:
            _settle(approvals, record, "nobody decided in time")
        else:
            out.append(record)
    return out


def _settle(store: ApprovalStore, record: ApprovalRecord, reason: str) -> ApprovalRecord | None:
    try:
        return store.decide_approval(
            record.session_id,
            record.request_id,
            decision="deny" if record.kind == "approval" else None,
            by="timeout",
            reason=reason,
        )
    except UsageError:  # decided meanwhile
        return None


def orphaned_decisions(store: HistoryStore | Any, session_id: str, turn: int, seq: int) -> list[AgentEvent]:
    """A turn whose process died is being finished: its requests still pending are denied
    (:data:`ORPHANED`) and their decision events returned (numbered from ``seq``) for its history."""
    if not isinstance(store, ApprovalStore):
        return []
    events: list[AgentEvent] = []
    for record in store.list_approvals(session_id, pending=True):
        if record.turn != turn:
            continue
        decided = _settle(store, record, ORPHANED)
        if decided is None:
            continue
        common: dict[str, Any] = {"seq": seq + len(events), "turn": turn, "ts": time.time()}
        if decided.kind == "question":
            events.append(
                QuestionAnswerEvent(request_id=decided.request_id, answer=None, by="timeout", **common)
            )
        else:
            events.append(
                ApprovalDecisionEvent(
                    request_id=decided.request_id, decision="deny", by="timeout", reason=ORPHANED, **common
                )
            )
    return events


def check_decision(decision: str | None, answer: str | None, reason: str | None) -> None:
    """A client's decision as every runtime takes it (UsageError naming what to change)."""
    if decision not in (None, "allow", "deny"):
        raise UsageError(f"decision must be 'allow' or 'deny', not {decision!r}")
    if reason is not None and len(reason) > 4000:
        raise UsageError("the reason is longer than 4000 characters; shorten it")
    if answer is not None and len(answer) > 16000:
        raise UsageError("the answer is longer than 16000 characters; shorten it")


async def decide(
    store: HistoryStore | Any,
    session_id: str,
    request_id: str,
    *,
    decision: str | None = None,
    answer: str | None = None,
    reason: str | None = None,
    key_id: str | None = None,
) -> ApprovalRecord:
    """Write a client's decision (the first wins) and wake the call if it waits in this process."""
    approvals = _approvals(store)
    check_decision(decision, answer, reason)
    record = await asyncio.to_thread(
        approvals.decide_approval,
        session_id,
        request_id,
        decision="allow" if decision == "allow" else "deny" if decision == "deny" else None,
        answer=answer,
        by="client",
        reason=reason,
        key_id=key_id,
    )
    wake(session_id, request_id)
    return record
