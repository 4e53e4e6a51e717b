"""``ServerHistory``: the sessions a ``harness-run serve`` keeps, read through its API with one key
(the sessions that key may see), and a person's decisions sent to it. It is the
:class:`~harness_run.runtime._history.SessionHistory` of :class:`ServerEngine`'s sessions and what
``harness-run top --server`` reads. The server writes its history itself: nothing here writes it."""

from __future__ import annotations

import urllib.parse
import warnings
from typing import Any

from harness_run.errors import ApprovalNotFoundError, SessionNotFoundError
from harness_run.events import AgentEvent, parse_event
from harness_run.runtime._approvals import check_decision
from harness_run.runtime._transcript import Transcript, transcript_of
from harness_run.runtime.server_client._wire import Wire
from harness_run.store import ApprovalRecord, SessionRecord, TurnRecord

__all__ = ["ServerHistory", "ServerStore", "session_path"]


def session_path(session_id: str) -> str:
    """``/v1/sessions/{id}``, the id quoted (an id is a UUID; anything else stays one path segment)."""
    return f"/v1/sessions/{urllib.parse.quote(session_id, safe='')}"


class ServerHistory:
    """The history a server keeps, read through its API: ``GET /v1/sessions``, ``/v1/sessions/{id}``,
    its ``/history``, ``/events`` and ``/approvals``; decisions ``POST``-ed to the server, which
    records the deciding key."""

    def __init__(self, wire: Wire) -> None:
        self.wire = wire

    def __repr__(self) -> str:
        return f"ServerHistory({self.wire.base_url!r})"

    def list_sessions(self, engine: str | None = None) -> list[SessionRecord]:
        """The sessions the key may see (of ``engine``, when given), with their live status."""
        query = f"?engine={urllib.parse.quote(engine, safe='')}" if engine else ""
        answer = self.wire.call("GET", f"/v1/sessions{query}")
        return [SessionRecord.model_validate(s) for s in answer["sessions"]]

    def get_session(self, session_id: str) -> SessionRecord | None:
        """The session's record, or None when the server has none the key may see."""
        try:
            return SessionRecord.model_validate(self.wire.call("GET", session_path(session_id)))
        except SessionNotFoundError:
            return None

    def list_turns(self, session_id: str) -> list[TurnRecord]:
        answer = self.wire.call("GET", f"{session_path(session_id)}/history")
        return [TurnRecord.model_validate(t) for t in answer["turns"]]

    def read_events(self, session_id: str, turn: int | None = None) -> list[AgentEvent]:
        answer = self.wire.call("GET", f"{session_path(session_id)}/events?format=json")
        events = [parse_event(e) for e in answer["events"]]
        return [e for e in events if turn is None or e.turn == turn]

    def list_approvals(self, session_id: str, *, pending: bool = False) -> list[ApprovalRecord]:
        """The session's requests of every turn (``pending``: those waiting now; the server settles
        those of a turn whose process died), oldest first."""
        query = "?turn=all" + ("&pending=1" if pending else "")
        answer = self.wire.call("GET", f"{session_path(session_id)}/approvals{query}")
        return [ApprovalRecord.model_validate(a) for a in answer["approvals"]]

    def pending_approvals(self, session_id: str) -> list[ApprovalRecord]:
        return self.list_approvals(session_id, pending=True)

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
        """``POST /v1/sessions/{id}/approvals/{request_id}``: the server decides as this client's key
        (``key_id`` is the server's to record, not the client's to give)."""
        del key_id
        check_decision(decision, answer, reason)
        body: dict[str, Any] = {"answer": answer} if answer is not None else {"decision": decision}
        if reason is not None and answer is None:
            body["reason"] = reason
        path = f"{session_path(session_id)}/approvals/{urllib.parse.quote(request_id, safe='')}"
        try:
            return ApprovalRecord.model_validate(await self.wire.acall("POST", path, body))
        except SessionNotFoundError as exc:
            raise ApprovalNotFoundError(str(exc)) from None

    def transcript(self, record: SessionRecord) -> Transcript:
        """The conversation from the server's stored events; the harness's native session files are
        not served (``native`` is empty)."""
        return transcript_of(record, self.read_events(record.session_id))


class ServerStore(ServerHistory):
    """Deprecated: :class:`ServerHistory`'s name before it stopped passing for a history store.
    Removed in the release after 0.1.0."""

    def __init__(self, wire: Wire) -> None:
        warnings.warn(
            "harness_run.runtime.server_client.ServerStore is deprecated: use ServerHistory (the same reads; "
            "it writes nothing, and the server's history changes through the Engine/Session API)",
            DeprecationWarning,
            stacklevel=2,
        )
        super().__init__(wire)
