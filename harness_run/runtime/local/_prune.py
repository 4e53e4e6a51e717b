"""Idle local workspaces: listing them and pruning them (``harness-run sessions prune``).

A workspace is *idle* when no turn of its session runs (its stored status is not ``running``) and
its session's last change (the end of its last turn, or its start) is older than the retention;
a workspace folder whose session has no record any more counts by the folder's own age.
"""

from __future__ import annotations

import shutil
import time
from dataclasses import dataclass
from pathlib import Path

from harness_run.runtime._cleanup import purge_session
from harness_run.store import HistoryStore, SessionRecord

__all__ = ["IdleWorkspace", "idle_workspaces", "prune_workspaces"]


@dataclass(frozen=True, slots=True)
class IdleWorkspace:
    session_id: str
    path: Path
    idle_s: float
    record: SessionRecord | None
    """None: the folder's session has no history any more."""


def idle_workspaces(
    workdir: Path, store: HistoryStore, older_than: float, *, now: float | None = None
) -> list[IdleWorkspace]:
    """The session folders under ``workdir/sessions`` idle for at least ``older_than`` seconds."""
    now = time.time() if now is None else now
    root = workdir / "sessions"
    found: list[IdleWorkspace] = []
    for folder in sorted(root.iterdir()) if root.is_dir() else []:
        if not folder.is_dir():
            continue
        record = store.get_session(folder.name)
        if record is not None and record.status == "running":
            continue
        idle = now - (record.updated_at if record is not None else folder.stat().st_mtime)
        if idle >= older_than:
            found.append(IdleWorkspace(folder.name, folder, idle, record))
    return found


def prune_workspaces(store: HistoryStore, workspaces: list[IdleWorkspace], *, history: bool = False) -> None:
    """Remove the workspaces (sessions stay re-attachable: a checkpointed workspace is restored,
    else its repos are cloned again on the next turn); with ``history`` their history goes too."""
    for entry in workspaces:
        shutil.rmtree(entry.path, ignore_errors=True)
        if history and entry.record is not None:
            purge_session(store, entry.record)
