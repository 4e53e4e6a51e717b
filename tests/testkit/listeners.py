"""Listeners on 127.0.0.1 for the egress tests: a canary that only counts the connections reaching
it (nothing may), and an HTTP server standing for an allowed host."""

from __future__ import annotations

import contextlib
import http.server
import socket
import threading
from collections.abc import Iterator
from typing import Any

__all__ = ["ALLOWED_BODY", "Canary", "allowed_server", "canary_listener"]

ALLOWED_BODY = "allowed-host-answered"


class Canary:
    """A TCP listener on 127.0.0.1 counting the connections that reach it (``hits``)."""

    def __init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.sock.settimeout(0.05)
        self.port = int(self.sock.getsockname()[1])
        self.hits = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                continue
            self.hits += 1
            conn.close()

    def close(self) -> None:
        self._stop.set()
        self._thread.join()
        self.sock.close()


@contextlib.contextmanager
def canary_listener() -> Iterator[Canary]:
    listener = Canary()
    try:
        yield listener
    finally:
        listener.close()


class _Allowed(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        body = ALLOWED_BODY.encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        pass


@contextlib.contextmanager
def allowed_server() -> Iterator[int]:
    """An HTTP server on 127.0.0.1 answering :data:`ALLOWED_BODY`; yields its port."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Allowed)
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield int(server.server_address[1])
    finally:
        server.shutdown()
        server.server_close()
