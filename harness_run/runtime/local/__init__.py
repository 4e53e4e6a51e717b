"""The local runtime: harness subprocesses in per-session workspaces, history in SQLite."""

from harness_run.runtime.local._engine import (
    LocalEngine,
    TurnEnv,
    default_workdir,
    spec_version,
    turn_settings,
)
from harness_run.runtime.local._workspace import SessionPaths, Workspaces, resolve_workdir

__all__ = [
    "LocalEngine",
    "SessionPaths",
    "TurnEnv",
    "Workspaces",
    "default_workdir",
    "resolve_workdir",
    "spec_version",
    "turn_settings",
]
