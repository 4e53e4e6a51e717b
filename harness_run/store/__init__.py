"""Durable history behind one protocol: SQLite + blob files locally (GCS for the sandbox runtime)."""

from harness_run.store._protocol import HistoryStore
from harness_run.store._records import EngineRecord, SessionRecord, SnapshotRef, TurnRecord
from harness_run.store.sqlite import SqliteStore

__all__ = ["EngineRecord", "HistoryStore", "SessionRecord", "SnapshotRef", "SqliteStore", "TurnRecord"]
