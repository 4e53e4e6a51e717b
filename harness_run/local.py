"""Run agents on this machine: ``local.deploy(spec).start_session().run(prompt)``.

``deploy`` prepares nothing heavy up front; workspaces, repos, skills and package venvs are made on
a session's first turn and reused. History (and, with ``checkpoint=True``, snapshots) goes to an
SQLite store under the workdir (``$HARNESS_RUN_HOME``, default ``~/.local/share/harness-run``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from harness_run.errors import UsageError
from harness_run.events import RunResult
from harness_run.runtime.local import LocalEngine, default_workdir
from harness_run.spec import AgentSpec, SessionConfig, TurnConfig
from harness_run.store import SqliteStore

__all__ = ["LocalEngine", "deploy", "get_engine", "run"]


def deploy(
    spec: AgentSpec,
    *,
    workdir: str | Path | None = None,
    claude_binary: str | None = None,
    codex_binary: str | None = None,
    opencode_binary: str | None = None,
) -> LocalEngine:
    """An engine for ``spec`` on this machine."""
    return LocalEngine(
        spec,
        workdir=workdir,
        claude_binary=claude_binary,
        codex_binary=codex_binary,
        opencode_binary=opencode_binary,
    )


def get_engine(name: str, *, workdir: str | Path | None = None, version: str | None = None) -> LocalEngine:
    """The engine last deployed under ``name`` in ``workdir`` (e.g. from another process)."""
    root = Path(workdir) if workdir is not None else default_workdir()
    store = SqliteStore(root)
    record = store.get_engine(name, version)
    if record is None:
        known = sorted({e.name for e in store.list_engines()})
        raise UsageError(f"no engine named {name!r} in {root}; deployed engines: {known or 'none'}")
    return LocalEngine(AgentSpec.from_dict(record.spec), workdir=root, store=store)


def run(
    spec: AgentSpec,
    prompt: str,
    *,
    secrets: Mapping[str, str] | None = None,
    config: TurnConfig | Mapping[str, Any] | None = None,
    session_config: SessionConfig | None = None,
    workdir: str | Path | None = None,
) -> RunResult:
    """One turn from synchronous code: deploy, start a session, run, return the result."""

    async def _main() -> RunResult:
        engine = deploy(spec, workdir=workdir)
        try:
            return await engine.start_session(session_config).run(prompt, secrets=secrets, config=config)
        finally:
            engine.close()

    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(_main())
    raise UsageError(
        "local.run() is for synchronous code; inside async code use "
        "`await local.deploy(spec).start_session().run(prompt)`"
    )
