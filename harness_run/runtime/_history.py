"""``SessionHistory``: what a :class:`~harness_run.runtime.Session` reads of its history (its record,
finished turns, events, transcript) and where a person's decision on its approval requests goes.

A store-backed engine gives its sessions :class:`StoreHistory` over its
:class:`~harness_run.store.HistoryStore`; the team server's client gives them the server's API
(``harness_run.runtime.server_client.ServerHistory``). Writes of turns are the engine's business, not this.
"""

from __future__ import annotations

from typing import Protocol

from harness_run.events import AgentEvent
from harness_run.runtime._approvals import decide, pending_approvals
from harness_run.runtime._transcript import Transcript, load_transcript
from harness_run.store import ApprovalRecord, HistoryStore, SessionRecord, TurnRecord

__all__ = ["SessionHistory", "StoreHistory"]


class SessionHistory(Protocol):
    """A session's history as its :class:`~harness_run.runtime.Session` reads it, from any process.

    - ``get_session``: the stored record, or None when there is none by that id.
    - ``list_turns``/``read_events``: the finished turns, the stored events (all turns, or one).
    - ``pending_approvals``: the requests waiting for a person now (requests left by a turn whose
      process died are settled as denied, not listed).
    - ``decide``: a person's decision on one request (the first decision wins; a second raises
      UsageError, an unknown id ApprovalNotFoundError).
    - ``transcript``: the conversation of ``record``'s session.
    """

    def get_session(self, session_id: str) -> SessionRecord | None: ...

    def list_turns(self, session_id: str) -> list[TurnRecord]: ...

    def read_events(self, session_id: str, turn: int | None = None) -> list[AgentEvent]: ...

    def pending_approvals(self, session_id: str) -> list[ApprovalRecord]: ...

    async def decide(
        self,
        session_id: str,
        request_id: str,
        *,
        decision: str | None = None,
        answer: str | None = None,
        reason: str | None = None,
        key_id: str | None = None,
    ) -> ApprovalRecord: ...

    def transcript(self, record: SessionRecord) -> Transcript: ...


class StoreHistory:
    """The :class:`SessionHistory` of a session kept in ``store`` (local, container, sandbox, E2B and
    Daytona engines): read from the store, decisions written to it (and the waiting call woken when
    it waits in this process)."""

    def __init__(self, store: HistoryStore) -> None:
        self.store = store

    def __repr__(self) -> str:
        return f"StoreHistory({self.store!r})"

    def get_session(self, session_id: str) -> SessionRecord | None:
        return self.store.get_session(session_id)

    def list_turns(self, session_id: str) -> list[TurnRecord]:
        return self.store.list_turns(session_id)

    def read_events(self, session_id: str, turn: int | None = None) -> list[AgentEvent]:
        return self.store.read_events(session_id, turn)

    def pending_approvals(self, session_id: str) -> list[ApprovalRecord]:
        return pending_approvals(self.store, session_id)

    async def decide(
        self,
        session_id: str,
        request_id: str,
        *,
        decision: str | None = None,
        answer: str | None = None,
        reason: str | None = None,
        key_id: str | None = None,
    ) -> ApprovalRecord:
        return await decide(
            self.store, session_id, request_id, decision=decision, answer=answer, reason=reason, key_id=key_id
        )

    def transcript(self, record: SessionRecord) -> Transcript:
        return load_transcript(self.store, record)
