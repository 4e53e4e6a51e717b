"""Durable history behind one protocol: SQLite + blob files locally, a GCS bucket for the sandbox runtime.

``GcsStore`` imports google-cloud-storage only when a store is opened, so importing this package
stays light.
"""

from harness_run.store._approvals import ApprovalRecord, ApprovalStore
from harness_run.store._open import engine_view, open_store
from harness_run.store._protocol import HistoryStore, SessionUpdate
from harness_run.store._records import (
    ApiKeyRecord,
    EngineRecord,
    EngineRuntime,
    KeyScope,
    SessionRecord,
    SessionStatus,
    SnapshotRef,
    TurnLease,
    TurnRecord,
)
from harness_run.store.gcs import GcsStore
from harness_run.store.sqlite import SqliteStore

__all__ = [
    "ApiKeyRecord",
    "ApprovalRecord",
    "ApprovalStore",
    "EngineRecord",
    "EngineRuntime",
    "GcsStore",
    "HistoryStore",
    "KeyScope",
    "SessionRecord",
    "SessionStatus",
    "SessionUpdate",
    "SnapshotRef",
    "SqliteStore",
    "TurnLease",
    "TurnRecord",
    "engine_view",
    "open_store",
]
