"""Egress control: an HTTP proxy that lets the agent reach only the spec's ``network.allow_hosts``.

:class:`EgressProxy` speaks the forward-proxy protocol every HTTP client knows through
``HTTPS_PROXY``/``HTTP_PROXY``: ``CONNECT host:port`` (TLS, any TCP) and absolute-URI requests
(plain HTTP). A destination is let through when it matches an allowed host (``name``, ``*.suffix``,
each with an optional ``:port``; without one, ports 443 and 80), or when the request carries the
worker's own token as ``Proxy-Authorization`` (the worker's model upstream, git and store traffic:
trusted code, any destination). Everything else gets ``403`` naming the host and the setting
(``407`` with a challenge when a worker token is set: git sends proxy credentials only after one),
and is counted in :attr:`EgressProxy.refused`.

It listens on 127.0.0.1 (the worker in a pod: the agent's way out) or on a unix socket (the
container runtime: the proxy runs on the host, the container has no network, and
:class:`LoopbackRelay` inside it turns a loopback port into that socket).

Plain asyncio streams: no aiohttp, nothing re-framed — bytes are spliced both ways once the
destination is decided.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import hmac
import os
from collections.abc import Sequence
from typing import Final
from urllib.parse import urlsplit

__all__ = ["AGENT_PROXY_ENV", "NO_PROXY", "EgressProxy", "LoopbackRelay", "host_allowed", "proxy_env"]

AGENT_PROXY_ENV: Final = "HARNESS_RUN_AGENT_PROXY"
"""Set in the worker's environment when egress is controlled: the agent's ``HTTP(S)_PROXY``
(:func:`~harness_run.security.agent_env` puts it in place of any proxy the worker itself uses)."""
NO_PROXY: Final = "localhost,127.0.0.1,::1"
"""Loopback stays direct: the harness reaches its model proxy (127.0.0.1) without the egress proxy."""
_PROXY_VARS: Final = ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy")
_HEAD_LIMIT: Final = 64 * 1024
_CONNECT_TIMEOUT: Final = 30.0
_CHUNK: Final = 64 * 1024


def proxy_env(proxy_url: str) -> dict[str, str]:
    """The variables that send an HTTP client's traffic through ``proxy_url`` (loopback direct)."""
    return {**dict.fromkeys(_PROXY_VARS, proxy_url), "NO_PROXY": NO_PROXY, "no_proxy": NO_PROXY}


def host_allowed(allow_hosts: Sequence[str], host: str, port: int) -> bool:
    """Whether ``host:port`` matches an entry of ``network.allow_hosts`` (``name``, ``*.suffix``,
    optional ``:port``; an entry without a port allows 443 and 80)."""
    host = host.lower().rstrip(".")
    for entry in allow_hosts:
        name, _, raw_port = entry.lower().partition(":")
        ports = (int(raw_port),) if raw_port else (443, 80)
        if port not in ports:
            continue
        if name.startswith("*.") and host.endswith(name[1:]) and len(host) > len(name) - 1:
            return True
        if host == name:
            return True
    return False


class EgressProxy:
    """A forward proxy enforcing an allow-list (see the module docstring). ``start()`` binds it:
    on ``unix_path`` if given, else on 127.0.0.1 (``port`` after start)."""

    def __init__(
        self, allow_hosts: Sequence[str], *, worker_token: str | None = None, unix_path: str | None = None
    ) -> None:
        self.allow_hosts = tuple(allow_hosts)
        self._token = worker_token
        self.unix_path = unix_path
        self.port = 0
        self.refused: list[str] = []
        """Destinations refused (``host:port``), oldest first."""
        self.forwarded = 0
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    async def start(self) -> None:
        if self.unix_path is not None:
            self._server = await asyncio.start_unix_server(self._serve, self.unix_path, limit=_HEAD_LIMIT)
            os.chmod(self.unix_path, 0o666)  # the container's user connects; the token/allow-list decide
        else:
            self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0, limit=_HEAD_LIMIT)
            self.port = int(self._server.sockets[0].getsockname()[1])

    async def aclose(self) -> None:
        if self._server is not None:
            self._server.close()
            for task in list(self._tasks):
                task.cancel()
            with contextlib.suppress(Exception):
                await self._server.wait_closed()
            self._server = None
        if self.unix_path is not None:
            with contextlib.suppress(OSError):
                os.unlink(self.unix_path)

    def _trusted(self, header: str) -> bool:
        scheme, _, value = header.strip().partition(" ")
        if self._token is None or scheme.lower() != "basic":
            return False
        try:
            _, _, password = base64.b64decode(value.strip(), validate=True).decode().partition(":")
        except (binascii.Error, UnicodeDecodeError):
            return False
        return hmac.compare_digest(password.encode(), self._token.encode())

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        if task is not None:
            self._tasks.add(task)
        try:
            await self._proxy(reader, writer)
        except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, ValueError):
            pass
        finally:
            if task is not None:
                self._tasks.discard(task)
            writer.close()

    async def _proxy(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        method, target, version = [*lines[0].split(" "), "", "", ""][:3]
        headers = [line for line in lines[1:] if line]
        auth = next(
            (h.partition(":")[2] for h in headers if h.lower().startswith("proxy-authorization:")), ""
        )
        if method.upper() == "CONNECT":
            host, port = _split_host_port(target, 443)
            forward = b""
        else:
            url = urlsplit(target)
            if url.scheme != "http" or not url.hostname:
                await _answer(writer, 400, f"harness-run egress: {target!r} is not an absolute http:// URL")
                return
            host, port = url.hostname, url.port or 80
            path = url.path or "/"
            kept = [
                h for h in headers if not h.lower().startswith(("proxy-authorization:", "proxy-connection:"))
            ]
            request_line = f"{method} {path}{'?' + url.query if url.query else ''} {version}"
            forward = ("\r\n".join([request_line, *kept]) + "\r\n\r\n").encode("latin-1")
        if not (self._trusted(auth) or host_allowed(self.allow_hosts, host, port)):
            self.refused.append(f"{host}:{port}")
            # with a worker token, 407: git (curl's "anyauth") sends its proxy credentials only
            # after a challenge
            await _answer(
                writer,
                407 if self._token is not None else 403,
                f"harness-run egress: {host}:{port} is not in the spec's network.allow_hosts "
                f"({', '.join(self.allow_hosts) or 'egress none'}); add it to network.allow_hosts",
            )
            return
        try:
            upstream_reader, upstream_writer = await asyncio.wait_for(
                asyncio.open_connection(host, port), _CONNECT_TIMEOUT
            )
        except (OSError, TimeoutError) as exc:
            await _answer(writer, 502, f"harness-run egress: cannot connect to {host}:{port}: {exc}")
            return
        self.forwarded += 1
        if forward:
            upstream_writer.write(forward)
        else:
            writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
        await splice(reader, writer, upstream_reader, upstream_writer)


class LoopbackRelay:
    """127.0.0.1:``port`` → the unix socket ``unix_path``, byte for byte (inside a container without
    network: the way to the host's :class:`EgressProxy`)."""

    def __init__(self, unix_path: str) -> None:
        self.unix_path = unix_path
        self.port = 0
        self._server: asyncio.Server | None = None

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = int(self._server.sockets[0].getsockname()[1])

    async def aclose(self) -> None:
        if self._server is not None:
            self._server.close()
            self._server = None

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.open_unix_connection(self.unix_path)
        except OSError:
            writer.close()
            return
        await splice(reader, writer, up_reader, up_writer)


async def splice(
    a_reader: asyncio.StreamReader,
    a_writer: asyncio.StreamWriter,
    b_reader: asyncio.StreamReader,
    b_writer: asyncio.StreamWriter,
) -> None:
    """Copy both ways until both sides are done (a half-close is passed on), then close both."""

    async def pump(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
        try:
            while chunk := await src.read(_CHUNK):
                dst.write(chunk)
                await dst.drain()
            if dst.can_write_eof():
                dst.write_eof()
        except (OSError, RuntimeError):
            dst.close()

    try:
        await asyncio.gather(pump(a_reader, b_writer), pump(b_reader, a_writer))
    finally:
        a_writer.close()
        b_writer.close()


async def _answer(writer: asyncio.StreamWriter, status: int, message: str) -> None:
    reason = {400: "Bad Request", 403: "Forbidden", 407: "Proxy Authentication Required", 502: "Bad Gateway"}
    body = (message + "\n").encode()
    challenge = 'Proxy-Authenticate: Basic realm="harness-run egress"\r\n' if status == 407 else ""
    writer.write(
        f"HTTP/1.1 {status} {reason[status]}\r\n{challenge}Content-Type: text/plain\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode()
        + body
    )
    with contextlib.suppress(OSError):
        await writer.drain()


def _split_host_port(target: str, default: int) -> tuple[str, int]:
    if target.startswith("["):  # [v6]:port
        host, _, rest = target[1:].partition("]")
        return host, int(rest.removeprefix(":") or default)
    host, _, port = target.rpartition(":")
    if not host:
        return target, default
    return host, int(port)
