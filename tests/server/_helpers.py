"""Test infrastructure for the server: a real server on 127.0.0.1 in a thread of the test process
(its own event loop, the same app ``harness-run serve`` runs), and the CLI in a subprocess."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import threading
from pathlib import Path
from types import TracebackType

from aiohttp import web

from harness_run import AgentSpec
from harness_run.server import ServerState, create_key, key_store, make_app
from harness_run.store import SqliteStore

MODEL = "claude-sonnet-4-6"


class ServerThread:
    """``with ServerThread(store_dir, [spec]) as server:`` -> ``server.url``, ``server.key``."""

    def __init__(self, root: Path, specs: list[AgentSpec]) -> None:
        self.root = root
        self.specs = specs
        self.url = ""
        self.key = ""
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._stop: asyncio.Event | None = None
        self._thread = threading.Thread(target=self._main, daemon=True)
        self.failure: BaseException | None = None

    def __enter__(self) -> ServerThread:
        self._thread.start()
        self._ready.wait(30)
        if self.failure is not None:
            raise self.failure
        return self

    def __exit__(self, *exc: object | TracebackType) -> None:
        if self._stop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(30)

    def _main(self) -> None:
        self._loop.run_until_complete(self._serve())
        self._loop.close()

    async def _serve(self) -> None:
        self._stop = asyncio.Event()
        store = SqliteStore(self.root)
        try:
            keys = key_store(store)
            _, self.key = create_key(keys, "tests")
            state = ServerState(store, self.root, self.specs)
            runner = web.AppRunner(make_app(state, keys), access_log=None, shutdown_timeout=1.0)
            await runner.setup()
            site = web.TCPSite(runner, "127.0.0.1", 0)
            await site.start()
            port = runner.addresses[0][1]
            self.url = f"http://127.0.0.1:{port}"
        except BaseException as exc:
            self.failure = exc
            self._ready.set()
            store.close()
            return
        self._ready.set()
        await self._stop.wait()
        await state.close()
        await runner.cleanup()
        store.close()


def cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """``harness-run ARGS`` in a subprocess (the real entry point)."""
    return subprocess.run(
        [sys.executable, "-m", "harness_run", *args],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, **(env or {})},
        check=False,
    )
