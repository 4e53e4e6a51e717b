"""The local runtime: harness subprocesses in per-session workspaces, history in SQLite."""

from harness_run.runtime.local._engine import (
    LocalEngine,
    TurnEnv,
    default_workdir,
    spec_version,
    turn_settings,
)
from harness_run.runtime.local._prune import IdleWorkspace, idle_workspaces, prune_workspaces
from harness_run.runtime.local._workspace import SessionPaths, Workspaces, resolve_workdir

__all__ = [
    "IdleWorkspace",
    "LocalEngine",
    "SessionPaths",
    "TurnEnv",
    "Workspaces",
    "default_workdir",
    "idle_workspaces",
    "prune_workspaces",
    "resolve_workdir",
    "spec_version",
    "turn_settings",
]
