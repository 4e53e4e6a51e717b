"""Which sandbox a session's turns run in, on runtimes whose workspaces live in the sandbox (and
which idle sandbox a new session on the same (remote, branch) may take over: branch pooling).

A session of its own (``workspace.mode="new"``) has a sandbox of its own, named by its session id.
Sessions of one engine in ``workspace.mode="shared"`` on one branch share one sandbox — a *slot*
named after the engine and the branch (a Kubernetes label value) — and the workspace in it; their
turns take turns (``WorkerEngine`` holds a lock per slot from before the claim until the result).
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Collection, Mapping
from typing import TYPE_CHECKING, Any, cast

if TYPE_CHECKING:
    from harness_run.runtime.worker_client._provider import SandboxProvider
    from harness_run.spec import AgentSpec
    from harness_run.store import HistoryStore

__all__ = ["idle_donor", "pool_key_of", "shared_slot"]


def shared_slot(engine: str, config: Mapping[str, Any]) -> str | None:
    """The slot of a session in ``workspace.mode="shared"`` (from its stored config), else None."""
    workspace: object = config.get("workspace")
    if not isinstance(workspace, dict) or cast("dict[str, object]", workspace).get("mode") != "shared":
        return None
    branch = config.get("branch")
    body = f"{engine}\0{branch if isinstance(branch, str) else ''}"
    return f"shared-{hashlib.sha256(body.encode()).hexdigest()[:20]}"


def pool_key_of(
    engine: str, config: Mapping[str, Any], spec: AgentSpec, owner: str | None = None
) -> str | None:
    """The (remote, branch) pooling key of a session with its own workspace and repos, else None."""
    if not spec.repos or shared_slot(engine, config) is not None:
        return None
    from harness_run.runtime.local import pool_key

    branch = config.get("branch")
    return pool_key(engine, spec, branch if isinstance(branch, str) else None, owner)


def idle_donor(
    key: str,
    session_id: str,
    keys: Mapping[str, str],
    busy: Collection[str],
    claims: SandboxProvider,
    store: HistoryStore,
    pool_after: float,
) -> str | None:
    """A session of this process (``keys``: session -> pool key) whose sandbox holds an idle
    workspace for ``key``: its claim is held and unused, it is not ``busy`` (a turn of it runs, or
    ``on_close`` work is pending), and its last change is at least ``pool_after`` seconds old (the
    local runtime's meaning of idle; the worker then checks the checkout is clean and pushed, else
    it clones). Blocking (store reads)."""
    for donor, donor_key in list(keys.items()):
        claim = claims.held(donor)
        if donor == session_id or donor_key != key or claim is None or claim.busy or claim.broken:
            continue
        if donor in busy:
            continue
        record = store.get_session(donor)
        if record is None or record.status == "running" or time.time() - record.updated_at < pool_after:
            continue
        return donor
    return None
