"""The HTTP side of the scripted model: a stdlib ``ThreadingHTTPServer`` and its request handler.

Routes (matched on the path's ending, so ``/v1/…`` and any other prefix work; query strings such as
``?beta=true`` are ignored):

* ``POST …/messages`` — Anthropic Messages (SSE when ``stream`` is true, else JSON)
* ``POST …/messages/count_tokens`` — ``{"input_tokens": N}`` (a rough estimate; never scripted)
* ``POST …/publishers/anthropic/models/<model>:rawPredict`` / ``:streamRawPredict`` — Anthropic
  Messages the way Vertex AI serves them (the model in the path); ``…/count-tokens:rawPredict``
* ``POST …/token`` — a Google OAuth token endpoint: any grant gets ``{"access_token": "ya29.scripted-N"}``
  (so google-auth credentials whose ``token_uri`` points here work offline)
* ``POST …/responses`` — OpenAI Responses (SSE or JSON)
* ``POST …/chat/completions`` — OpenAI Chat Completions (SSE or JSON)
* ``GET …/models`` and ``GET …/models/<id>`` — one model, in a shape both vendors' clients accept
* ``GET /`` and ``GET /health`` — ``{"status": "ok"}``; anything else — 404 with an error JSON.
"""

from __future__ import annotations

import contextlib
import gzip
import json
import logging
import socket
import threading
import time
import zlib
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING, Any, Protocol
from urllib.parse import urlsplit

from harness_run.testing._requests import ApiKind, RecordedRequest, credential_sha256, redact_headers
from harness_run.testing._resolve import resolve
from harness_run.testing._wire_anthropic import anthropic_error, anthropic_json, anthropic_stream
from harness_run.testing._wire_openai import (
    chat_json,
    chat_stream,
    openai_error,
    responses_json,
    responses_stream,
)

if TYPE_CHECKING:
    from harness_run.testing._replies import Reply

__all__ = ["ModelBackend", "ModelServer", "classify"]

log = logging.getLogger("harness_run.testing")


def classify(method: str, path: str) -> ApiKind:
    """Which API a request path belongs to."""
    path = path.rstrip("/")
    if method == "POST":
        if path.endswith(("/messages/count_tokens", "/count-tokens:rawPredict")):
            return "count_tokens"
        if path.endswith("/messages") or (
            "/publishers/anthropic/models/" in path and path.endswith(("RawPredict", ":rawPredict"))
        ):
            return "anthropic"
        if path.endswith("/responses"):
            return "responses"
        if path.endswith("/chat/completions"):
            return "chat"
    if method in ("GET", "HEAD") and (path.endswith("/models") or "/models/" in path):
        return "models"
    return "other"


class ModelBackend(Protocol):
    """What the HTTP server needs from the model it serves (:class:`ScriptedModel`): a default model
    name, a place to record each request, and the reply to a model request."""

    model_name: str

    def _record(self, request: RecordedRequest) -> None: ...

    def _answered(self, request: RecordedRequest) -> None: ...

    def _choose(self, request: RecordedRequest) -> Reply: ...


class ModelServer(ThreadingHTTPServer):
    """A threading HTTP server bound to one model backend (a :class:`ScriptedModel`); tracks connections."""

    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, address: tuple[str, int], model: ModelBackend) -> None:
        self.model = model
        self.stopping = threading.Event()
        self._conns: set[socket.socket] = set()
        self._conns_lock = threading.Lock()
        self.tokens_issued = 0
        """OAuth access tokens issued by ``POST …/token`` (``ya29.scripted-<n>``)."""
        super().__init__(address, _Handler)

    def track(self, conn: socket.socket, *, add: bool) -> None:
        with self._conns_lock:
            (self._conns.add if add else self._conns.discard)(conn)

    def close_connections(self) -> None:
        """Shut down every open client connection (idle keep-alive ones included)."""
        with self._conns_lock:
            conns = list(self._conns)
        for conn in conns:
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # small writes (SSE events) go out at once, as from a real API
    server: ModelServer  # pyright: ignore[reportIncompatibleVariableOverride]
    server_version = "harness-run-scripted-model"
    _responded = False

    def setup(self) -> None:
        super().setup()
        self.server.track(self.connection, add=True)

    def finish(self) -> None:
        try:
            super().finish()
        finally:
            self.server.track(self.connection, add=False)

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("scripted model: " + format, *args)

    def do_POST(self) -> None:
        self._handle()

    def do_GET(self) -> None:
        self._handle()

    def do_HEAD(self) -> None:
        self._handle()

    def do_PUT(self) -> None:
        self._handle()

    def do_DELETE(self) -> None:
        self._handle()

    # -- request ------------------------------------------------------------------------------

    def _read_body(self) -> bytes:
        if self.headers.get("transfer-encoding", "").lower() == "chunked":
            data = bytearray()
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    self.rfile.readline()
                    break
                data += self.rfile.read(size)
                self.rfile.readline()
            raw = bytes(data)
        else:
            length = int(self.headers.get("content-length") or 0)
            raw = self.rfile.read(length) if length else b""
        encoding = self.headers.get("content-encoding", "").lower()
        if encoding == "gzip":
            return gzip.decompress(raw)
        if encoding == "deflate":
            return zlib.decompress(raw)
        if encoding == "zstd":
            try:
                from compression import zstd  # type: ignore[import-not-found]  # Python >= 3.14
            except ImportError:
                return raw
            return zstd.decompress(raw)  # pyright: ignore
        return raw

    def _handle(self) -> None:
        self._responded = False
        parts = urlsplit(self.path)
        raw = self._read_body()
        try:
            body: Any = json.loads(raw) if raw else None
        except ValueError:
            body = raw.decode("utf-8", "replace")
        api = classify(self.command, parts.path)
        record = RecordedRequest(
            api=api,
            method=self.command,
            path=parts.path,
            query=parts.query,
            headers=redact_headers(self.headers.items()),
            body=body,
            credential_sha256=credential_sha256(self.headers.items()),
        )
        model = self.server.model
        model._record(record)  # pyright: ignore[reportPrivateUsage]
        try:
            if record.is_model_request:
                self._answer_model(record)
            else:
                self._answer_other(record)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True
        except Exception as exc:  # a bug or a failing Rule predicate: answer 500, never hang
            log.exception("scripted model: failed to answer %s %s", self.command, record.path)
            record.outcome = "failed"
            record.failure = f"{type(exc).__name__}: {exc}"
            message = f"scripted model failed: {record.failure}"
            body = anthropic_error(500, message) if api == "anthropic" else openai_error(500, message)
            with contextlib.suppress(OSError):
                if self._responded:
                    self._cut()
                else:
                    self._send_json(500, body)
        finally:
            model._answered(record)  # pyright: ignore[reportPrivateUsage]

    # -- responses ----------------------------------------------------------------------------

    def _send_json(self, status: int, payload: Any) -> None:
        data = json.dumps(payload).encode()
        self._responded = True
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        if status >= 400:
            self.send_header("x-should-retry", "false")
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    def _answer_other(self, record: RecordedRequest) -> None:
        path = record.path.rstrip("/")
        name = self.server.model.model_name
        if record.api == "count_tokens":
            record.outcome = "endpoint"
            self._send_json(200, {"input_tokens": max(1, len(json.dumps(record.body)) // 4)})
        elif record.api == "models":
            record.outcome = "endpoint"
            entry = {
                "id": name,
                "object": "model",
                "type": "model",
                "display_name": name,
                "created": 0,
                "created_at": "2025-01-01T00:00:00Z",
                "owned_by": "harness-run",
            }
            if path.endswith("/models"):
                self._send_json(
                    200,
                    {"object": "list", "data": [entry], "has_more": False, "first_id": name, "last_id": name},
                )
            else:
                self._send_json(200, {**entry, "id": path.rsplit("/", 1)[-1]})
        elif path.endswith("/token") and self.command == "POST":
            record.outcome = "endpoint"
            self.server.tokens_issued += 1
            token = f"ya29.scripted-{self.server.tokens_issued}"
            self._send_json(200, {"access_token": token, "expires_in": 3600, "token_type": "Bearer"})
        elif path in ("", "/health") and self.command in ("GET", "HEAD"):
            record.outcome = "endpoint"
            self._send_json(200, {"status": "ok", "server": "harness-run scripted model"})
        else:
            record.outcome = "not_found"
            message = f"scripted model: no endpoint {self.command} {record.path}"
            wants_anthropic = "/messages" in path or "anthropic-version" in record.headers
            self._send_json(
                404, anthropic_error(404, message) if wants_anthropic else openai_error(404, message)
            )

    def _answer_model(self, record: RecordedRequest) -> None:
        model = self.server.model
        reply = model._choose(record)  # pyright: ignore[reportPrivateUsage]
        if reply.delay and self.server.stopping.wait(reply.delay):
            return
        if reply.http_error is not None:
            err = reply.http_error
            body = (
                anthropic_error(err.status, err.message, err.type)
                if record.api == "anthropic"
                else openai_error(err.status, err.message, err.type)
            )
            self._send_json(err.status, body)
            return
        if reply.drop_connection and not record.stream:
            self._cut()
            return
        outs = resolve(reply, record)
        name = record.model or model.model_name
        if record.stream:
            if record.api == "anthropic":
                events = anthropic_stream(reply, outs, name)
            elif record.api == "responses":
                events = responses_stream(reply, outs, name)
            else:
                options = record.json.get("stream_options")
                include = isinstance(options, dict) and bool(options.get("include_usage"))  # pyright: ignore
                events = chat_stream(reply, outs, name, include_usage=include)
            self._send_stream(events, cut=reply.drop_connection)
        elif record.api == "anthropic":
            self._send_json(200, anthropic_json(reply, outs, name))
        elif record.api == "responses":
            self._send_json(200, responses_json(reply, outs, name))
        else:
            self._send_json(200, chat_json(reply, outs, name))

    def _send_stream(self, events: list[bytes], *, cut: bool) -> None:
        self._responded = True
        self.send_response(200)
        self.send_header("content-type", "text/event-stream; charset=utf-8")
        self.send_header("cache-control", "no-cache")
        self.send_header("transfer-encoding", "chunked")
        self.end_headers()
        try:
            for event in events:
                self.wfile.write(b"%x\r\n%s\r\n" % (len(event), event))
                self.wfile.flush()
            if cut:
                time.sleep(0.05)  # let the client see the partial stream first
                self._cut()
                return
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True

    def _cut(self) -> None:
        """Drop the connection without completing the response."""
        self.close_connection = True
        try:
            self.wfile.flush()
            self.connection.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
