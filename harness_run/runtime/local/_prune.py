"""Idle local workspaces: listing them and pruning them (``harness-run sessions prune``).

A workspace is *idle* when no turn of its session runs (its stored status is not ``running``) and
its session's last change (the end of its last turn, or its start) is older than the retention;
a workspace folder whose session has no record any more counts by the folder's own age. A shared
workspace (``shared/<engine>/<branch>/``) is idle when no turn holds it and its last turn ended
longer ago than the retention. Host directories (``workspace.host_dir``) are never touched: only
the session's own folder (its harness home) goes.

The retention is ``$HARNESS_RUN_WORKSPACE_TTL`` (a duration: 90s, 30m, 12h, 7d; default 7d):
``harness-run sessions prune`` uses it unless ``--older-than`` is given.
"""

from __future__ import annotations

import os
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

from harness_run.errors import UsageError
from harness_run.runtime._cleanup import purge_session
from harness_run.runtime._workspace import WorkspaceLock
from harness_run.store import HistoryStore, SessionRecord

__all__ = [
    "DEFAULT_WORKSPACE_TTL",
    "IdleWorkspace",
    "idle_workspaces",
    "parse_age",
    "prune_workspaces",
    "workspace_ttl",
]

DEFAULT_WORKSPACE_TTL = "7d"
_UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}


def parse_age(text: str, what: str = "--older-than") -> float:
    """``90s``, ``30m``, ``12h``, ``7d`` (or plain seconds) in seconds; UsageError naming ``what``."""
    text = text.strip()
    number, unit = (text[:-1], text[-1]) if text[-1:] in _UNITS else (text, "s")
    try:
        value = float(number) * _UNITS[unit]
    except ValueError:
        value = -1.0
    if not value >= 0 or value == float("inf"):
        raise UsageError(f"{what} {text!r} is not a duration; write it like 90s, 30m, 12h or 7d")
    return value


def workspace_ttl() -> tuple[float, str]:
    """The retention of idle local workspaces: ``$HARNESS_RUN_WORKSPACE_TTL``, else 7 days
    (seconds, and the text it came from)."""
    text = os.environ.get("HARNESS_RUN_WORKSPACE_TTL", "").strip() or DEFAULT_WORKSPACE_TTL
    return parse_age(text, "HARNESS_RUN_WORKSPACE_TTL"), text


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
    return found + _idle_shared(workdir / "shared", older_than, now)


def _idle_shared(root: Path, older_than: float, now: float) -> list[IdleWorkspace]:
    """Shared workspaces (``shared/<engine>/<branch>/``) no turn holds, last used long enough ago."""
    found: list[IdleWorkspace] = []
    for folder in sorted(root.glob("*/*")) if root.is_dir() else []:
        lock = WorkspaceLock(folder / ".lock", "harness-run sessions prune")
        if not folder.is_dir() or lock.busy():
            continue
        idle = now - (lock.last_used() or folder.stat().st_mtime)
        if idle >= older_than:
            found.append(IdleWorkspace(f"shared:{folder.parent.name}/{folder.name}", folder, idle, None))
    return found


def prune_workspaces(store: HistoryStore, workspaces: list[IdleWorkspace], *, history: bool = False) -> None:
    """Remove the workspaces (sessions stay re-attachable: a checkpointed workspace is restored,
    else its repos are cloned again on the next turn); with ``history`` their history goes too.
    A workspace a turn has taken meanwhile (its lock is held) is left alone."""
    for entry in workspaces:
        shared = entry.session_id.startswith("shared:")
        lock = WorkspaceLock(entry.path / (".lock" if shared else ".workspace.lock"), "sessions prune")
        if not lock.try_acquire():
            continue
        try:
            shutil.rmtree(entry.path, ignore_errors=True)
        finally:
            lock.release()
        if history and entry.record is not None:
            purge_session(store, entry.record)
