"""The history store port. Local runs use SQLite + blob files; the sandbox runtime uses GCS."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from harness_run.store._records import EngineRecord, SessionRecord, TurnRecord

__all__ = ["HistoryStore"]


class HistoryStore(Protocol):
    """Durable history. Contract:

    - writes are atomic per call; a record read back equals the record written;
    - ``put_blob`` is content-addressed (returns the key) and idempotent;
    - ``get_session``/``get_blob`` return None for unknown keys; corrupt data raises ``StoreError``;
    - events are appended per turn in ``seq`` order; ``read_events`` returns them in that order;
    - nothing here ever holds a secret value — callers redact before writing.
    """

    def put_engine(self, record: EngineRecord) -> None: ...

    def get_engine(self, name: str, version: str | None = None) -> EngineRecord | None: ...

    def list_engines(self, name: str | None = None) -> list[EngineRecord]: ...

    def put_session(self, record: SessionRecord) -> None: ...

    def get_session(self, session_id: str) -> SessionRecord | None: ...

    def list_sessions(self, engine: str | None = None) -> list[SessionRecord]: ...

    def put_turn(self, record: TurnRecord) -> None: ...

    def list_turns(self, session_id: str) -> list[TurnRecord]: ...

    def append_events(self, session_id: str, turn: int, events: Sequence[dict[str, Any]]) -> None: ...

    def read_events(self, session_id: str, turn: int | None = None) -> list[dict[str, Any]]: ...

    def put_blob(self, data: bytes) -> str: ...

    def get_blob(self, key: str) -> bytes | None: ...

    def close(self) -> None: ...
