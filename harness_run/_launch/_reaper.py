"""Ends a turn's processes when the client process that started them dies (a script, not imported).

    python -I -S _reaper.py PID TAG

``TurnProcess`` (or, spawning first, ``harness-run run``) starts it by this file's path
(``_spawn.reaper_argv``) next to the harness CLI (PID, the leader of the CLI's process group), in a
session of its own, with a pipe as stdin whose only writer is the client. The client writes
``done`` once it has cleaned up the turn itself; end-of-file without it means the client is gone
(the kernel closes the pipe even on SIGKILL). Then the CLI's process group, its descendants and
every process carrying TAG (``HARNESS_RUN_TURN=…``) in its environment get SIGTERM and, one
second later, SIGKILL. Standard library only: it starts in milliseconds, without the package.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import time

_GRACE = 1.0


def _turn_pids(pid: int, tag: str) -> list[int]:
    """Descendants of ``pid`` and processes whose environment holds ``tag``."""
    marker = f"\0{tag}\0".encode()
    children: dict[int, list[int]] = {}
    found: list[int] = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as handle:
                ppid = int(handle.read().decode(errors="replace").rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(ppid, []).append(int(entry))
        with contextlib.suppress(OSError), open(f"/proc/{entry}/environ", "rb") as handle:
            if marker in b"\0" + handle.read():
                found.append(int(entry))
    todo = [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return [pid, *dict.fromkeys(found)]


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            return b") Z " not in handle.read()
    except OSError:
        return False


def _signal(pid: int, pids: list[int], sig: signal.Signals) -> None:
    with contextlib.suppress(OSError):
        os.killpg(pid, sig)
    for target in pids:
        with contextlib.suppress(OSError):
            os.kill(target, sig)


def main(argv: list[str]) -> int:
    pid, tag = int(argv[1]), argv[2]
    received = b""
    while chunk := os.read(0, 256):
        received += chunk
    if b"done" in received:
        os._exit(0)  # the client cleaned up; no interpreter teardown to wait for
    pids = _turn_pids(pid, tag)
    _signal(pid, pids, signal.SIGTERM)
    deadline = time.monotonic() + _GRACE
    while time.monotonic() < deadline and any(_alive(p) for p in pids):
        time.sleep(0.05)
    _signal(pid, [*pids, *_turn_pids(pid, tag)], signal.SIGKILL)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
