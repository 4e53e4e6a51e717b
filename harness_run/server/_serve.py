"""Running the server: open the store, build the engines, listen until SIGTERM/SIGINT."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from harness_run.errors import UsageError
from harness_run.runtime.local import DEFAULT_IDLE_TTL, LocalEngine, default_workdir
from harness_run.server._app import make_app
from harness_run.server._hardening import (
    agent_uids_for_serve,
    check_local_agents,
    make_undumpable,
    private_store,
)
from harness_run.server._keys import CachedKeys, key_store, server_secret
from harness_run.server._limits import GuardedRunner
from harness_run.server._policy import ServerPolicy
from harness_run.server._sandbox import SandboxAccess
from harness_run.server._state import ServerState, WarmOptions
from harness_run.spec import AgentSpec
from harness_run.store import GcsStore, HistoryStore, SqliteStore, open_store
from harness_run.web import listening

__all__ = ["open_server_store", "serve"]

log = logging.getLogger("harness_run.server")

KEY_CACHE_SECONDS = 5.0
"""A key record is re-read at most this often (any store): a revoked key stops within 5 s."""


def open_server_store(store: str | None) -> tuple[HistoryStore, Path]:
    """The history store (``--store``: a path or ``gs://…``; default the local workdir's) and the
    workdir the local engines keep their workspaces in."""
    if store is None:
        workdir = default_workdir()
        return SqliteStore(workdir), workdir
    opened = open_store(store)
    if isinstance(opened, SqliteStore):
        return opened, opened.root
    return opened, default_workdir()


async def serve(
    store: str | None,
    *,
    specs: Sequence[AgentSpec] = (),
    host: str = "127.0.0.1",
    port: int = 8080,
    ready: Callable[[int], None] | None = None,
    sandbox: SandboxAccess | None = None,
    engines: Sequence[str] = (),
    serve_recorded: bool = False,
    allow_exec: bool = False,
    policy: ServerPolicy | None = None,
    agent_uids: str | None = None,
    warm_pool: int = 0,
    idle_ttl: float | None = None,
) -> None:
    """Serve ``specs`` and the engines of ``store`` named in ``engines`` (every recorded one with
    ``serve_recorded``) on ``host:port`` until SIGTERM/SIGINT; then stop the running turns (their
    results are stored) and return. ``ready(port)`` is called once listening. ``sandbox``: the
    cluster of the store's sandbox engines (default: none, they are skipped). ``allow_exec``: let
    keys with the ``exec`` scope run commands on local engines, i.e. on this host. ``policy``: what
    callers may change (default :class:`ServerPolicy`'s: only tightening). ``agent_uids``
    (``--agent-uids FIRST-LAST|off``; default: a uid per session when this process may switch
    users): local engines' agents run as a uid of their own per session; a server that cannot
    switch users refuses local engines unless it is ``off`` (``_hardening.check_local_agents``).
    ``warm_pool``/``idle_ttl``: local engines' warm harness processes (``local.deploy``'s)."""
    started = time.monotonic()
    undumpable = make_undumpable()  # before any secret is read: /proc/<server> is closed to agents
    if not store:
        raise UsageError(
            "serve needs --store DIR or gs://bucket/prefix: the sessions it serves are kept there "
            "(to serve engines you ran locally: --store ~/.harness-run --engine NAME)"
        )
    uids = agent_uids_for_serve(agent_uids)
    secret = await asyncio.to_thread(server_secret)
    history, workdir = await asyncio.to_thread(open_server_store, store)
    if isinstance(history, SqliteStore):
        _log_private(await asyncio.to_thread(private_store, history.root), history.root)
    keys = key_store(history)
    if isinstance(history, GcsStore):  # the served engines' folders only (all a server's account may reach)
        recorded = await asyncio.to_thread(history.list_engines) if serve_recorded else []
        history.only_engines({*(s.name for s in specs), *engines, *(r.name for r in recorded)})
    # unknown key ids are refused from a cached id set (no store read per request); a bucket read
    # per request would also be too slow: a revoked key stops within KEY_CACHE_SECONDS
    keys = CachedKeys(keys, KEY_CACHE_SECONDS)
    try:
        warm = WarmOptions(warm_pool=warm_pool, idle_ttl=DEFAULT_IDLE_TTL if idle_ttl is None else idle_ttl)
        state = ServerState(
            history, workdir, list(specs), sandbox=sandbox, policy=policy, agent_user=uids, warm=warm
        )
    except BaseException:
        history.close()
        raise
    try:
        _choose(state, {spec.name for spec in specs}, set(engines), serve_recorded)
        local = [name for name, engine in state.engines.items() if isinstance(engine, LocalEngine)]
        check_local_agents(local, uids, agent_uids)
        for name in local:  # warm pools start filling now, in this loop (their processes belong to it)
            engine = state.engines[name]
            assert isinstance(engine, LocalEngine)
            engine.fill_soon()
    except BaseException:
        await state.close()
        history.close()
        raise
    if local and uids is not None:
        log.info("local engines' agents run as a uid of their own per session (of %s)", uids)
    if not undumpable:
        log.warning("the server process could not be made non-dumpable (not Linux?)")
    if not state.engines:
        skipped = "".join(f"; {name} is {why}" for name, why in sorted(state.skipped.items()))
        history.close()
        raise UsageError(
            "no engine to serve: pass --spec FILE, or name an engine of this store with --engine NAME "
            f"(or --serve-recorded for all of them){skipped}"
        )
    app = make_app(state, keys, secret=secret, allow_exec=allow_exec)
    try:  # request heads time out, connections are capped (GuardedRunner, _limits)
        async with listening(app, host=host, port=port, runner_type=GuardedRunner) as site:
            log.info(
                "harness-run server on http://%s (ready in %.2f s)", site.where, time.monotonic() - started
            )
            if ready is not None:
                ready(site.port)
            try:
                await site.stop.wait()
            finally:
                await state.close()
    finally:
        with contextlib.suppress(Exception):
            history.close()


def _choose(state: ServerState, given: set[str], named: set[str], serve_recorded: bool) -> None:
    """Keep the given specs and the recorded engines the operator named (all with
    ``serve_recorded``): a store's other engines (every engine ever run from this workdir) are
    not served to key holders by accident."""
    unknown = sorted(named - set(state.engines) - set(state.skipped))
    if unknown:
        raise UsageError(
            f"--engine {', '.join(unknown)}: not recorded in this store; it records "
            f"{sorted(set(state.engines) | set(state.skipped))}"
        )
    if serve_recorded:
        return
    for name in list(state.engines):
        if name not in given and name not in named:
            state.skipped[name] = "recorded in the store: name it with --engine to serve it"
            del state.engines[name]


def _log_private(changed: list[Path], root: Path) -> None:
    """``private_store``'s changes: a store that others could read is the server user's only now."""
    if changed:
        shown = ", ".join(str(p.relative_to(root)) if p != root else str(root) for p in changed[:5])
        more = f" and {len(changed) - 5} more" if len(changed) > 5 else ""
        log.info("store %s: took group/other permissions off %s%s", root, shown, more)
