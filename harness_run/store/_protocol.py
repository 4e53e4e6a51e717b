"""The history store port. Local runs use SQLite + blob files; the sandbox runtime uses GCS."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol

from harness_run.events import AgentEvent
from harness_run.store._records import EngineRecord, SessionRecord, TurnLease, TurnRecord

__all__ = ["HistoryStore", "SessionUpdate"]

SessionUpdate = Callable[[SessionRecord], SessionRecord | None]
"""Given the current record, return the new one (or None to leave it as it is)."""


class HistoryStore(Protocol):
    """Durable history, shared by every process (and, for GCS, every machine) that opens it.

    Contract:

    - writes are atomic per call; a record read back equals the record written;
    - ``put_blob`` is content-addressed (returns the key) and idempotent;
    - ``get_session``/``get_blob``/``get_engine`` return None for unknown keys; corrupt data raises
      ``StoreError`` naming what is corrupt and leaves it as it was;
    - events are :data:`~harness_run.events.AgentEvent` objects in and out: the store serializes
      them (``event.model_dump_json()``) and reads them back as the same typed events (a stored
      event it cannot read is corrupt: ``StoreError``). They are appended per turn, keyed by
      ``(session, turn, event.seq)``: re-appending an event never duplicates it (the first copy
      stored wins); ``read_events`` returns them ordered by ``(turn, seq)``, only those with
      ``seq > after_seq``;
    - ``reserve_turn`` succeeds once per ``(session, turn)`` across every client; ``holder`` is
      unique to the attempt (e.g. the turn id), which may repeat the call (a retried request);
      any other holder gets ``SessionBusyError``. The reservation is a lease: ``renew_turn`` (by
      its holder, while the turn runs) stamps it with the time, ``get_turn_lease`` reads holder
      and stamp back (None: not reserved), so that another client can tell a turn whose owner died
      (a stamp older than the owner's renewal period) from a running one. ``renew_turn`` by
      another holder gets ``SessionBusyError``; on a turn nobody reserved it reserves it;
    - ``update_session`` is a read-modify-write that never loses a concurrent update;
    - ``delete_session`` removes a session's record, turns, events and reservations (its blobs
      stay: content-addressed, they may be shared; ``delete_blob`` removes one); unknown ids and
      keys are no-ops;
    - nothing here ever holds a secret value — callers redact before writing.
    """

    def put_engine(self, record: EngineRecord) -> None: ...

    def get_engine(self, name: str, version: str | None = None) -> EngineRecord | None: ...

    def list_engines(self, name: str | None = None) -> list[EngineRecord]: ...

    def delete_engine(self, name: str, version: str) -> None: ...

    def put_session(self, record: SessionRecord) -> None: ...

    def get_session(self, session_id: str) -> SessionRecord | None: ...

    def update_session(self, session_id: str, update: SessionUpdate) -> SessionRecord | None: ...

    def list_sessions(self, engine: str | None = None) -> list[SessionRecord]: ...

    def reserve_turn(self, session_id: str, turn: int, holder: str) -> None: ...

    def renew_turn(self, session_id: str, turn: int, holder: str) -> None: ...

    def get_turn_lease(self, session_id: str, turn: int) -> TurnLease | None: ...

    def put_turn(self, record: TurnRecord) -> None: ...

    def list_turns(self, session_id: str) -> list[TurnRecord]: ...

    def append_events(self, session_id: str, turn: int, events: Sequence[AgentEvent]) -> None: ...

    def read_events(
        self, session_id: str, turn: int | None = None, *, after_seq: int = -1
    ) -> list[AgentEvent]: ...

    def delete_session(self, session_id: str) -> None: ...

    def put_blob(self, data: bytes) -> str: ...

    def delete_blob(self, key: str) -> None: ...

    def get_blob(self, key: str) -> bytes | None: ...

    def close(self) -> None: ...
