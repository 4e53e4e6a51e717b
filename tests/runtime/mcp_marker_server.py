"""A tiny MCP stdio server for the tests (newline-delimited JSON-RPC, no ``mcp`` package).

    python mcp_marker_server.py MARKER_PATH

One tool, ``make_marker(note)``, writes MARKER_PATH: the note, and whether the ``MARKER_TOKEN``
environment variable is set and how long it is (never its value).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

TOOL = {
    "name": "make_marker",
    "description": "Write the marker file.",
    "inputSchema": {"type": "object", "properties": {"note": {"type": "string"}}, "required": ["note"]},
}


def answer(request: dict[str, Any], marker: Path) -> dict[str, Any] | None:
    method, params = request.get("method"), request.get("params") or {}
    if method == "initialize":
        return {
            "protocolVersion": params.get("protocolVersion", "2025-06-18"),
            "capabilities": {"tools": {"listChanged": False}},
            "serverInfo": {"name": "marker", "version": "0.1"},
        }
    if method == "tools/list":
        return {"tools": [TOOL]}
    if method == "tools/call":
        note = str((params.get("arguments") or {}).get("note", ""))
        token = os.environ.get("MARKER_TOKEN")
        marker.write_text(
            json.dumps({"note": note, "token_set": token is not None, "token_len": len(token or "")})
        )
        text = f"marker written: {note}; token length {len(token or '')}"  # never the value
        return {"content": [{"type": "text", "text": text}], "isError": False}
    if method == "ping":
        return {}
    return None


def main() -> None:
    marker = Path(sys.argv[1])
    for line in sys.stdin:
        try:
            request = json.loads(line)
        except ValueError:
            continue
        if not isinstance(request, dict) or "id" not in request:
            continue  # notifications (notifications/initialized, cancelled …) need no answer
        result = answer(request, marker)
        if result is None:
            missing = {"code": -32601, "message": f"no method {request.get('method')}"}
            reply: dict[str, Any] = {"jsonrpc": "2.0", "id": request["id"], "error": missing}
        else:
            reply = {"jsonrpc": "2.0", "id": request["id"], "result": result}
        sys.stdout.write(json.dumps(reply) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
