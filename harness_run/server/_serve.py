"""Running the server: open the store, build the engines, listen until SIGTERM/SIGINT."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from aiohttp import web

from harness_run.errors import UsageError
from harness_run.runtime.local import default_workdir
from harness_run.server._app import make_app
from harness_run.server._keys import CachedKeys, key_store
from harness_run.server._sandbox import SandboxAccess
from harness_run.server._state import ServerState
from harness_run.spec import AgentSpec
from harness_run.store import HistoryStore, SqliteStore, open_store

__all__ = ["open_server_store", "serve"]

log = logging.getLogger("harness_run.server")

KEY_CACHE_SECONDS = 5.0
"""On a GCS store a key's record is re-read at most this often: a revoked key stops within 5 s."""


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
) -> None:
    """Serve the engines of ``store`` (plus ``specs``) on ``host:port`` until SIGTERM/SIGINT; then stop
    the running turns (their results are stored) and return. ``ready(port)`` is called once listening.
    ``sandbox``: the cluster of the store's sandbox engines (default: none, they are skipped)."""
    started = time.monotonic()
    history, workdir = await asyncio.to_thread(open_server_store, store)
    keys = key_store(history)
    if not isinstance(history, SqliteStore):  # a bucket read per request is too slow: cache briefly
        keys = CachedKeys(keys, KEY_CACHE_SECONDS)
    try:
        state = ServerState(history, workdir, list(specs), sandbox=sandbox)
    except BaseException:
        history.close()
        raise
    if not state.engines:
        skipped = "".join(f"; {name} is {why}" for name, why in sorted(state.skipped.items()))
        history.close()
        raise UsageError(
            "no engine to serve: pass --spec FILE, or deploy one into this store first "
            f"(harness-run run SPEC … with the same workdir){skipped}"
        )
    runner = web.AppRunner(make_app(state, keys), handle_signals=False, access_log=None, shutdown_timeout=3.0)
    await runner.setup()
    site = web.TCPSite(runner, host, port, reuse_address=True)
    await site.start()
    bound = _bound_port(runner, port)
    log.info("harness-run server on http://%s:%d (ready in %.2f s)", host, bound, time.monotonic() - started)
    if ready is not None:
        ready(bound)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    try:
        await stop.wait()
    finally:
        await state.close()
        await runner.cleanup()
        with contextlib.suppress(Exception):
            history.close()


def _bound_port(runner: web.AppRunner, default: int) -> int:
    for address in runner.addresses:
        if isinstance(address, tuple) and len(address) >= 2:  # pyright: ignore[reportUnknownArgumentType]
            return int(address[1])  # pyright: ignore[reportUnknownArgumentType]
    return default
