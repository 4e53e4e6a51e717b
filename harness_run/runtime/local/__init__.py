"""The local runtime: harness subprocesses in per-session workspaces, history in SQLite."""

from harness_run.runtime.local._agent_uids import DEFAULT_AGENT_UIDS, AgentUids
from harness_run.runtime.local._egress import check_host_egress
from harness_run.runtime.local._engine import (
    LocalEngine,
    TurnEnv,
    default_workdir,
    spec_version,
    turn_settings,
)
from harness_run.runtime.local._lease import finish_orphan, lease_seconds
from harness_run.runtime.local._pool import DEFAULT_POOL_AFTER, pool_key
from harness_run.runtime.local._prune import (
    DEFAULT_WORKSPACE_TTL,
    IdleWorkspace,
    idle_workspaces,
    parse_age,
    prune_workspaces,
    workspace_ttl,
)
from harness_run.runtime.local._spawn_first import SpawnFirst
from harness_run.runtime.local._warm import DEFAULT_IDLE_TTL, DEFAULT_MAX_IDLE, WarmProcess
from harness_run.runtime.local._workspace import SessionPaths, Workspaces, resolve_workdir

__all__ = [
    "DEFAULT_AGENT_UIDS",
    "DEFAULT_IDLE_TTL",
    "DEFAULT_MAX_IDLE",
    "DEFAULT_POOL_AFTER",
    "DEFAULT_WORKSPACE_TTL",
    "AgentUids",
    "IdleWorkspace",
    "LocalEngine",
    "SessionPaths",
    "SpawnFirst",
    "TurnEnv",
    "WarmProcess",
    "Workspaces",
    "check_host_egress",
    "default_workdir",
    "finish_orphan",
    "idle_workspaces",
    "lease_seconds",
    "parse_age",
    "pool_key",
    "prune_workspaces",
    "resolve_workdir",
    "spec_version",
    "turn_settings",
    "workspace_ttl",
]
