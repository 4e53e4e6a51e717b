# pyright: reportUnknownMemberType=false, reportUnknownArgumentType=false
"""The stdio MCP launcher: the harness starts it in place of an MCP server that needs secrets
(stdlib only, run as ``python -I -S _mcp_launcher.py SERVER``).

It connects to the engine's unix socket ``HARNESS_RUN_MCP_SOCKET`` with the turn's token
``HARNESS_RUN_MCP_TOKEN`` and the server's name; the engine starts the server named in the spec
(its command, with its secrets in *its* environment only) and relays its stdin and stdout through
this connection. The harness, its tools and this process never hold the secret. Exits 1 with a
message on stderr when the engine refuses (wrong token, unknown server, the turn is over).
"""

import contextlib
import json
import os
import socket
import sys
import threading


def _upstream(conn: socket.socket) -> None:
    """stdin → the server, until the harness closes it."""
    fd = sys.stdin.fileno()
    with contextlib.suppress(OSError):
        while data := os.read(fd, 65536):
            conn.sendall(data)
    with contextlib.suppress(OSError):
        conn.shutdown(socket.SHUT_WR)


def main(argv: list[str]) -> int:
    request = {
        "token": os.environ.get("HARNESS_RUN_MCP_TOKEN", ""),
        "server": argv[1] if len(argv) > 1 else "",
    }
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        conn.connect(os.environ.get("HARNESS_RUN_MCP_SOCKET", ""))
        conn.sendall(json.dumps(request).encode() + b"\n")
        answer = b""
        while not answer.endswith(b"\n") and len(answer) < 4096:  # byte by byte: nothing of the
            byte = conn.recv(1)  # server's output may be read into a buffer here
            if not byte:
                break
            answer += byte
    except OSError as exc:
        sys.stderr.write(f"harness-run MCP launcher: cannot reach the engine ({exc})\n")
        return 1
    if answer.strip() != b"ok":
        sys.stderr.write(
            f"harness-run MCP launcher: {answer.decode(errors='replace').strip() or 'refused'}\n"
        )
        return 1
    threading.Thread(target=_upstream, args=(conn,), daemon=True).start()
    out = sys.stdout.fileno()
    try:
        while data := conn.recv(65536):
            while data:
                data = data[os.write(out, data) :]
    except OSError:
        return 0
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
