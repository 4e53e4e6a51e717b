"""A tiny MCP server over streamable HTTP for the tests (stdlib, 127.0.0.1): JSON answers to
``initialize``, ``tools/list`` and ``tools/call``; it records the headers of every request."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

TOOL = {
    "name": "ping_remote",
    "description": "Answers pong.",
    "inputSchema": {"type": "object", "properties": {}},
}


class McpHttpServer:
    def __init__(self) -> None:
        self.headers: list[dict[str, str]] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                return

            def _reply(self, status: int, body: dict[str, Any] | None = None) -> None:
                data = json.dumps(body).encode() if body is not None else b""
                self.send_response(status)
                if body is not None:
                    self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:
                server.headers.append({k.lower(): v for k, v in self.headers.items()})
                self._reply(405)

            do_DELETE = do_GET

            def do_POST(self) -> None:
                server.headers.append({k.lower(): v for k, v in self.headers.items()})
                request = json.loads(self.rfile.read(int(self.headers.get("content-length") or 0)) or b"{}")
                if not isinstance(request, dict) or "id" not in request:
                    self._reply(202)
                    return
                method = request.get("method")
                params = request.get("params") or {}
                result: dict[str, Any]
                if method == "initialize":
                    result = {
                        "protocolVersion": params.get("protocolVersion", "2025-06-18"),
                        "capabilities": {"tools": {"listChanged": False}},
                        "serverInfo": {"name": "remote", "version": "0.1"},
                    }
                elif method == "tools/list":
                    result = {"tools": [TOOL]}
                elif method == "tools/call":
                    result = {"content": [{"type": "text", "text": "pong"}], "isError": False}
                else:
                    result = {}
                self._reply(200, {"jsonrpc": "2.0", "id": request["id"], "result": result})

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}/mcp"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def __enter__(self) -> McpHttpServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(5)
