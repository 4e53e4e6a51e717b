"""Deleting a session's history: its records, events and the checkpoint blobs only it uses."""

from __future__ import annotations

from collections.abc import Iterable

from harness_run.store import HistoryStore, SessionRecord, SnapshotRef

__all__ = ["purge_session"]


def _keys(refs: Iterable[SnapshotRef | None]) -> set[str]:
    return {key for ref in refs if ref is not None for key in (ref.workspace, ref.native) if key}


def purge_session(store: HistoryStore, record: SessionRecord) -> None:
    """Remove ``record``'s session from ``store``: records, turns, events, then the checkpoint
    blobs of its turns that no other session's current checkpoint uses (blobs are
    content-addressed: two sessions with identical workspaces share one)."""
    sid = record.session_id
    mine = _keys([record.snapshot, *(t.snapshot for t in store.list_turns(sid))])
    shared = _keys(r.snapshot for r in store.list_sessions() if r.session_id != sid)
    store.delete_session(sid)  # records first: an interrupted delete leaves only unreferenced blobs
    for key in sorted(mine - shared):
        store.delete_blob(key)
