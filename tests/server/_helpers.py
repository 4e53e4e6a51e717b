"""Test infrastructure for the server: a real server on 127.0.0.1 in a thread of the test process
(its own event loop, the same app ``harness-run serve`` runs), and the CLI in a subprocess."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import Any

from aiohttp import web

from harness_run import AgentSpec
from harness_run.server import KeyStore, ServerPolicy, ServerState, create_key, key_store, make_app
from harness_run.store import SqliteStore

MODEL = "claude-sonnet-4-6"


class ServerThread:
    """``with ServerThread(store_dir, [spec]) as server:`` -> ``server.url``, ``server.key``."""

    def __init__(
        self,
        root: Path,
        specs: list[AgentSpec],
        *,
        scopes: tuple[str, ...] = ("exec",),
        allow_exec: bool = True,
        policy: ServerPolicy | None = None,
        tune: Callable[[web.Application], None] | None = None,
    ) -> None:
        self.policy = policy
        self.tune = tune
        self.root = root
        self.specs = specs
        self.scopes = scopes
        self.allow_exec = allow_exec
        self.keys_store: KeyStore | None = None
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

    def new_key(self, name: str, *scopes: str) -> str:
        """Another key on this server's store (a second person)."""
        assert self.keys_store is not None
        return create_key(self.keys_store, name, scopes=scopes or ("turn",))[1]

    def _main(self) -> None:
        self._loop.run_until_complete(self._serve())
        self._loop.close()

    async def _serve(self) -> None:
        self._stop = asyncio.Event()
        store = SqliteStore(self.root)
        try:
            keys = key_store(store)
            self.keys_store = keys
            _, self.key = create_key(keys, "tests", scopes=self.scopes)
            state = ServerState(store, self.root, self.specs, policy=self.policy)
            app = make_app(state, keys, allow_exec=self.allow_exec)
            if self.tune is not None:
                self.tune(app)
            runner = web.AppRunner(app, access_log=None, shutdown_timeout=1.0)
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


def call(url: str, method: str = "GET", body: Any = None, key: str | None = None) -> tuple[int, Any]:
    """One JSON request (``body``: JSON data, or raw bytes as they are) -> (status, parsed answer);
    an error answer is parsed too (every error of the server is JSON)."""
    data = body if isinstance(body, bytes) else (json.dumps(body).encode() if body is not None else None)
    headers = {"Content-Type": "application/json", **({"Authorization": f"Bearer {key}"} if key else {})}
    request = urllib.request.Request(url, data=data, method=method, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=60) as answer:
            raw = answer.read()
            return answer.status, json.loads(raw) if raw else None
    except urllib.error.HTTPError as exc:
        raw = exc.read()
        return exc.code, json.loads(raw) if raw else None


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
