# pyright: reportUnknownMemberType=false, reportUnknownArgumentType=false
# (reads untyped JSON with the standard library only)
"""git credential helper: asks the engine for a repository's token, per request (stdlib only).

git runs it as ``python -I -S _git_helper.py get`` (configured per repository URL through
``GIT_CONFIG_*``, see :class:`~harness_run.security.GitBroker`) with the request on stdin
(``protocol=``, ``host=``, ``path=``). It sends that, with the turn's token from
``HARNESS_RUN_GIT_TOKEN``, to the engine's unix socket ``HARNESS_RUN_GIT_SOCKET`` and prints the
``username=``/``password=`` it answers. It prints nothing (git then fails the request) when the
turn is over, the token is wrong or the URL is not one of the session's repositories.
"""

import json
import os
import socket
import sys


def main(argv: list[str]) -> int:
    if argv[1:2] != ["get"]:
        return 0  # store / erase: nothing is kept anywhere
    fields = dict(line.split("=", 1) for line in sys.stdin.read().splitlines() if "=" in line)
    request = {"token": os.environ.get("HARNESS_RUN_GIT_TOKEN", ""), **fields}
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
            conn.settimeout(10)
            conn.connect(os.environ.get("HARNESS_RUN_GIT_SOCKET", ""))
            conn.sendall(json.dumps(request).encode() + b"\n")
            answer = json.loads(conn.makefile("rb").readline() or b"{}")
    except (OSError, ValueError):
        return 0
    if isinstance(answer, dict) and answer.get("password"):
        sys.stdout.write(
            f"username={answer.get('username', 'x-access-token')}\npassword={answer['password']}\n"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
