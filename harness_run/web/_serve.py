"""The serve loop of the team server and the worker: an app with the body limit, listening on TCP
(the bound port reported: port 0 picks a free one) or on a unix socket, until SIGTERM/SIGINT."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from collections.abc import AsyncGenerator, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from harness_run.web._body import MAX_BODY

if TYPE_CHECKING:
    from aiohttp import web

    from harness_run.web._errors import Middleware

__all__ = ["SHUTDOWN_TIMEOUT", "Listening", "bound_port", "listening", "new_app"]

SHUTDOWN_TIMEOUT = 3.0
"""Seconds open requests (event streams) get to finish once the server stops."""


def new_app(*middlewares: Middleware) -> web.Application:
    """An app with ``middlewares`` (outermost first) that accepts bodies up to :data:`MAX_BODY`."""
    from aiohttp import web

    return web.Application(middlewares=list(middlewares), client_max_size=MAX_BODY)


@dataclass
class Listening:
    """Where a server listens: ``port`` (the bound one; 0 on a unix socket) and ``where``
    (``host:port`` or the socket's path); ``stop`` is set by SIGTERM or SIGINT."""

    port: int
    where: str
    stop: asyncio.Event = field(default_factory=asyncio.Event)


@contextlib.asynccontextmanager
async def listening(
    app: web.Application,
    *,
    host: str = "127.0.0.1",
    port: int = 0,
    unix_socket: str | None = None,
    runner_type: Callable[..., web.AppRunner] | None = None,
) -> AsyncGenerator[Listening]:
    """Serve ``app`` on ``host:port``, or on ``unix_socket`` (made writable for every user: a
    container's worker whose client runs as another user), through a ``runner_type`` runner
    (default ``web.AppRunner``; no access log) that is cleaned up on leaving — open requests (event
    streams) get :data:`SHUTDOWN_TIMEOUT` seconds. SIGTERM and SIGINT set ``stop`` from before this
    yields: a signal right after the caller reports ready stops it cleanly."""
    from aiohttp import web

    make = runner_type or web.AppRunner
    runner = make(app, handle_signals=False, access_log=None, shutdown_timeout=SHUTDOWN_TIMEOUT)
    await runner.setup()
    try:
        if unix_socket is not None:
            await web.UnixSite(runner, unix_socket).start()
            os.chmod(unix_socket, 0o666)
            where = Listening(0, unix_socket)
        else:
            await web.TCPSite(runner, host, port, reuse_address=True).start()
            bound = bound_port(runner, port)
            where = Listening(bound, f"{host}:{bound}")
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, where.stop.set)
        yield where
    finally:
        await runner.cleanup()


def bound_port(runner: web.AppRunner, default: int) -> int:
    """The TCP port ``runner`` listens on (``default`` when it has none)."""
    for address in runner.addresses:
        if isinstance(address, tuple) and len(address) >= 2:  # pyright: ignore[reportUnknownArgumentType]
            return int(address[1])  # pyright: ignore[reportUnknownArgumentType]
    return default
