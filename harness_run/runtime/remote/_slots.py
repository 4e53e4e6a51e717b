"""Which sandbox a session's turns run in, on runtimes whose workspaces live in the sandbox.

A session of its own (``workspace.mode="new"``) has a sandbox of its own, named by its session id.
Sessions of one engine in ``workspace.mode="shared"`` on one branch share one sandbox — a *slot*
named after the engine and the branch (a Kubernetes label value) — and the workspace in it; their
turns take turns (``WorkerEngine`` holds a lock per slot from before the claim until the result).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any, cast

__all__ = ["shared_slot"]


def shared_slot(engine: str, config: Mapping[str, Any]) -> str | None:
    """The slot of a session in ``workspace.mode="shared"`` (from its stored config), else None."""
    workspace: object = config.get("workspace")
    if not isinstance(workspace, dict) or cast("dict[str, object]", workspace).get("mode") != "shared":
        return None
    branch = config.get("branch")
    body = f"{engine}\0{branch if isinstance(branch, str) else ''}"
    return f"shared-{hashlib.sha256(body.encode()).hexdigest()[:20]}"
