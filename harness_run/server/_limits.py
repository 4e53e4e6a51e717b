"""What one client can hold of the server: event streams, failed key checks, connections.

- :class:`StreamLimits` caps the open SSE streams per API key and per session; one over the cap is
  answered 429 ``too_many_streams``, naming the limit.
- :class:`AuthFailures` counts the 401s of each remote address; a client with too many in a window
  gets 429 ``too_many_failures`` (instead of 401) for a cool-down; a valid key from that address
  still works (a shared NAT, a front end), and the key check is cheap (cached key ids).
- :class:`GuardedRunner` is ``web.AppRunner`` with a deadline for a request's head (a client that
  has not sent a complete request line and headers within ``head_timeout`` seconds of connecting, or
  of its previous response, is disconnected) and a cap on open connections (new ones beyond it are
  closed at once).
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
import weakref
from collections import deque
from collections.abc import Generator
from typing import Any

from aiohttp import web
from aiohttp.web_protocol import RequestHandler

from harness_run.web import error

__all__ = [
    "AUTH_FAILURES",
    "HEAD_TIMEOUT",
    "MAX_CONNECTIONS",
    "STREAMS_PER_KEY",
    "STREAMS_PER_SESSION",
    "STREAM_LIMITS",
    "AuthFailures",
    "GuardedRunner",
    "StreamLimits",
    "TooManyStreams",
    "auth_failures",
    "stream_limits",
]

STREAMS_PER_KEY = 32
"""Open event streams one API key may hold (every session together)."""
STREAMS_PER_SESSION = 64
"""Open event streams on one session (every key together)."""
HEAD_TIMEOUT = 10.0
"""Seconds a client has to send a complete request head (request line and headers)."""
MAX_CONNECTIONS = 1024
"""Open connections the server accepts; new ones beyond are closed at once."""


class TooManyStreams(Exception):
    """A stream over :class:`StreamLimits`'s cap; :meth:`response` is its 429."""

    def __init__(self, message: str, limit: str, cap: int) -> None:
        super().__init__(message)
        self.limit = limit
        self.cap = cap

    def response(self) -> web.Response:
        return error(429, "too_many_streams", str(self), self.limit)


class StreamLimits:
    """Counts the open event streams per key and per session::

        try:
            slot = limits.acquire(caller.key_id, session_id)
        except TooManyStreams as exc:
            return exc.response()
        with slot:
            ...  # stream

    Counts live in this process (one event loop); ``acquire`` and release never block."""

    def __init__(self, per_key: int = STREAMS_PER_KEY, per_session: int = STREAMS_PER_SESSION) -> None:
        if per_key < 1 or per_session < 1:
            raise ValueError("stream limits must be at least 1")
        self.per_key = per_key
        self.per_session = per_session
        self._keys: dict[str, int] = {}
        self._sessions: dict[str, int] = {}

    def open_streams(self, key_id: str | None = None, session_id: str | None = None) -> int:
        """The streams open now for ``key_id`` or ``session_id`` (or in all)."""
        if key_id is not None:
            return self._keys.get(key_id, 0)
        if session_id is not None:
            return self._sessions.get(session_id, 0)
        return sum(self._keys.values())

    def acquire(self, key_id: str, session_id: str) -> contextlib.AbstractContextManager[None]:
        """Count a stream of ``key_id`` on ``session_id``; leaving the returned context releases it.
        Raises :class:`TooManyStreams` (nothing counted) when either cap is reached."""
        if self._keys.get(key_id, 0) >= self.per_key:
            raise TooManyStreams(
                f"this API key ({key_id}) already holds {self.per_key} open event streams, the most "
                "one key may hold: close one (or resume it later with Last-Event-ID)",
                "streams_per_key",
                self.per_key,
            )
        if self._sessions.get(session_id, 0) >= self.per_session:
            raise TooManyStreams(
                f"session {session_id} already has {self.per_session} open event streams, the most "
                "one session may have: close one, or try again later",
                "streams_per_session",
                self.per_session,
            )
        self._keys[key_id] = self._keys.get(key_id, 0) + 1
        self._sessions[session_id] = self._sessions.get(session_id, 0) + 1
        return self._held(key_id, session_id)

    @contextlib.contextmanager
    def _held(self, key_id: str, session_id: str) -> Generator[None]:
        try:
            yield
        finally:
            _drop(self._keys, key_id)
            _drop(self._sessions, session_id)


def _drop(counts: dict[str, int], name: str) -> None:
    left = counts.get(name, 0) - 1
    if left > 0:
        counts[name] = left
    else:
        counts.pop(name, None)


class AuthFailures:
    """The failed key checks (401s) per remote address: after ``limit`` of them within ``window``
    seconds, :meth:`blocked` is true for ``cooldown`` seconds (a failed check is then answered 429,
    not 401). Thread-safe; the table is bounded (``max_clients``, the oldest forgotten first)."""

    def __init__(
        self, limit: int = 20, window: float = 10.0, cooldown: float = 30.0, max_clients: int = 10_000
    ) -> None:
        self.limit = limit
        self.window = window
        self.cooldown = cooldown
        self.max_clients = max_clients
        self._lock = threading.Lock()
        self._failures: dict[str, deque[float]] = {}
        self._until: dict[str, float] = {}

    def blocked(self, remote: str | None) -> bool:
        """Whether ``remote`` is cooling down after too many failures."""
        if remote is None:
            return False
        with self._lock:
            until = self._until.get(remote)
            if until is None:
                return False
            if time.monotonic() < until:
                return True
            del self._until[remote]
            return False

    def failed(self, remote: str | None) -> None:
        """Count one failed key check from ``remote``."""
        if remote is None:
            return
        now = time.monotonic()
        with self._lock:
            times = self._failures.pop(remote, None) or deque[float]()
            self._failures[remote] = times  # most recent last: the oldest is dropped first
            times.append(now)
            while times and times[0] <= now - self.window:
                times.popleft()
            if len(times) >= self.limit:
                self._until[remote] = now + self.cooldown
                times.clear()
            while len(self._failures) > self.max_clients:
                del self._failures[next(iter(self._failures))]
            while len(self._until) > self.max_clients:
                del self._until[next(iter(self._until))]

    def response(self) -> web.Response:
        """The 429 for a blocked client."""
        return error(
            429,
            "too_many_failures",
            f"more than {self.limit} requests with a missing or wrong API key within {self.window:g} s "
            f"from this address: wait {self.cooldown:g} s, and send a key from "
            "`harness-run serve keys create`",
        )


class GuardedRunner(web.AppRunner):
    """``web.AppRunner(app, **kwargs)`` whose connections must send a complete request head within
    ``head_timeout`` seconds (of connecting, or of their previous response: aiohttp's keep-alive
    timer, which also runs while a head is partly read) and of which at most ``max_connections``
    are open; a connection beyond is closed as soon as it is accepted."""

    def __init__(
        self,
        app: web.Application,
        *,
        head_timeout: float = HEAD_TIMEOUT,
        max_connections: int = MAX_CONNECTIONS,
        **kwargs: Any,
    ) -> None:
        super().__init__(app, keepalive_timeout=head_timeout, **kwargs)
        self.max_connections = max_connections

    async def _make_server(self) -> web.Server:
        return _CappedServer(await super()._make_server(), self.max_connections)


class _CappedServer(web.Server):
    """The app's server (same handler and settings), refusing connections beyond ``cap``."""

    def __init__(self, inner: web.Server, cap: int) -> None:  # pyright: ignore[reportMissingSuperCall]
        self.__dict__.update(inner.__dict__)  # the same handler, request factory and connection table
        self._cap = cap

    def __call__(self) -> RequestHandler:
        if len(self._connections) >= self._cap:
            return _Refused(self, loop=asyncio.get_running_loop())
        return super().__call__()


class _Refused(RequestHandler):
    """A connection over the cap: closed once accepted, never read."""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        transport.abort() if isinstance(transport, asyncio.Transport) else transport.close()

    def connection_lost(self, exc: BaseException | None) -> None:
        pass

    def data_received(self, data: bytes) -> None:
        pass


STREAM_LIMITS: web.AppKey[StreamLimits] = web.AppKey("stream_limits", StreamLimits)
"""The app's :class:`StreamLimits` (default: one with the default caps, made on first use)."""
AUTH_FAILURES: web.AppKey[AuthFailures] = web.AppKey("auth_failures", AuthFailures)
"""The app's :class:`AuthFailures` (default: one with the default thresholds, made on first use)."""
_MADE: weakref.WeakKeyDictionary[web.Application, tuple[StreamLimits, AuthFailures]] = (
    weakref.WeakKeyDictionary()
)


def _defaults(app: web.Application) -> tuple[StreamLimits, AuthFailures]:
    made = _MADE.get(app)
    if made is None:
        made = _MADE[app] = (StreamLimits(), AuthFailures())
    return made


def stream_limits(app: web.Application) -> StreamLimits:
    """``app[STREAM_LIMITS]`` if set (before the app starts), else the app's default one."""
    return app.get(STREAM_LIMITS) or _defaults(app)[0]


def auth_failures(app: web.Application) -> AuthFailures:
    """``app[AUTH_FAILURES]`` if set (before the app starts), else the app's default one."""
    return app.get(AUTH_FAILURES) or _defaults(app)[1]
