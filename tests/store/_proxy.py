"""A fault-injecting HTTP proxy in front of fake-gcs-server (real client, real server, real failures).

Rules say which requests fail and how: ``before`` answers 503 without forwarding (the request never
happened), ``after`` forwards it and then answers 503 (the write happened, the reply was lost).
"""

from __future__ import annotations

import http.client
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit


@dataclass
class Rule:
    method: str
    contains: str
    mode: str  # "before" | "after"
    times: int = 1
    hits: int = 0
    then: Callable[[], object] | None = None  # run after forwarding, before the failed reply


@dataclass
class FaultProxy:
    upstream: str
    rules: list[Rule] = field(default_factory=list[Rule])
    injected: list[str] = field(default_factory=list[str])

    def __post_init__(self) -> None:
        up = urlsplit(self.upstream)
        proxy = self
        lock = threading.Lock()

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: object) -> None:  # quiet
                return

            def _rule(self) -> Rule | None:
                with lock:
                    for rule in proxy.rules:
                        if (
                            rule.method == self.command
                            and rule.contains in self.path
                            and rule.hits < rule.times
                        ):
                            rule.hits += 1
                            proxy.injected.append(f"{rule.mode} {self.command} {self.path}")
                            return rule
                return None

            def _fail(self) -> None:
                body = b'{"error": {"code": 503, "message": "injected"}}'
                self.send_response(503)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def _handle(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else None
                rule = self._rule()
                if rule is not None and rule.mode == "before":
                    return self._fail()
                conn = http.client.HTTPConnection(up.hostname or "127.0.0.1", up.port or 80, timeout=30)
                headers = {k: v for k, v in self.headers.items() if k.lower() not in ("host", "connection")}
                conn.request(self.command, self.path, body=body, headers=headers)
                resp = conn.getresponse()
                data = resp.read()
                conn.close()
                if rule is not None:
                    if rule.then is not None:
                        rule.then()
                    return self._fail()
                self.send_response(resp.status)
                for key, value in resp.getheaders():
                    if key.lower() not in ("transfer-encoding", "connection", "content-length"):
                        self.send_header(key, value)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
                return None

            do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = _handle

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(5)
