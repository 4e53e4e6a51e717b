"""The guard hook's client: asks the engine's guard server for the verdict (built-ins only).

Run as ``python -I -S _guard_client.py SOCKET TOKEN [--shell]`` inside :func:`guard_command`'s
fail-closed wrapper, with the tool call (or, with ``--shell``, OpenCode's command text) on stdin. It
imports only the built-in ``_socket`` and ``sys`` (a Python start and nothing else: the rules and
their regular expressions are already compiled in the engine's process, see
:class:`~harness_run.security.GuardBroker`). Exit 0 only on the server's ``allow``; 2 with the
server's reason on ``deny``; anything else (no server, a wrong token, a dropped connection, an
unexpected answer) exits 1 or raises, which the wrapper turns into 2: deny.
"""

import _socket
import sys


def main(argv: list[str]) -> int:
    mode = b"shell" if argv[3:4] == ["--shell"] else b"hook"
    call = sys.stdin.buffer.read()
    reply = b""
    try:
        conn = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
        conn.settimeout(None)  # the wrapper's `timeout` ends it (a call may wait for a person)
        conn.connect(argv[1])
        conn.sendall(argv[2].encode() + b" " + mode + b"\n" + call)
        conn.shutdown(_socket.SHUT_WR)
        while chunk := conn.recv(65536):
            reply += chunk
        conn.close()
    except OSError as exc:
        sys.stderr.write(f"the guard server did not answer ({exc.strerror or type(exc).__name__})\n")
        return 1
    if reply == b"allow\n":
        return 0
    if reply.startswith(b"deny\n"):
        sys.stderr.write(reply[5:].decode(errors="replace"))
        return 2
    return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
