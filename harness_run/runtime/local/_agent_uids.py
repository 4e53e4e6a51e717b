"""One uid per session for the agent (``harness-run serve``): the harness CLI, its tools and ``exec``
commands of each session run as a uid of their own, so the kernel keeps one session's agent out of
the server's files (the store, ``/proc/<server>``) and out of every other session's files and
processes (a shared uid could read another turn's ``/proc/<pid>/environ`` and workspace).

The uids need no ``/etc/passwd`` entry; the server needs ``CAP_SETUID``/``CAP_SETGID`` (to spawn as
them), ``CAP_CHOWN``/``CAP_FOWNER`` (to hand the session's files over) and ``CAP_DAC_OVERRIDE`` (to
read them back for checkpoints): in practice, it runs as root.

Which session holds which uid is kept in ``<workdir>/agent-uids/`` (the server's only, 0700): a file
per session holding its uid, and ``next``, the next uid to hand out. A uid is never given to a
second session, even after the first is deleted: a process the first left behind could otherwise
reach the second's files.
"""

from __future__ import annotations

import fcntl
import os
import re
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from harness_run.errors import RunError, UsageError
from harness_run.runtime._agent_user import AgentUser

__all__ = ["DEFAULT_AGENT_UIDS", "AgentUids", "UidRegistry"]

_MAX_UID: Final = 2**32 - 2  # (uid_t)-1 means "unchanged" to the kernel
_RANGE = re.compile(r"^\s*(\d+)\s*-\s*(\d+)\s*$")


@dataclass(frozen=True, slots=True)
class AgentUids:
    """The uids (and gids, the same numbers) sessions' agents run as: ``first`` … ``last``."""

    first: int
    last: int

    def __post_init__(self) -> None:
        if not 1000 <= self.first <= self.last <= _MAX_UID:
            raise UsageError(
                f"agent uids {self.first}-{self.last}: give a range FIRST-LAST of unused ids, "
                f"1000 <= FIRST <= LAST <= {_MAX_UID}, e.g. {DEFAULT_AGENT_UIDS}"
            )

    def __str__(self) -> str:
        return f"{self.first}-{self.last}"

    @classmethod
    def parse(cls, text: str) -> AgentUids:
        """``FIRST-LAST`` (as ``serve --agent-uids`` takes it)."""
        match = _RANGE.match(text)
        if match is None:
            raise UsageError(f"--agent-uids {text!r}: give a range FIRST-LAST, e.g. {DEFAULT_AGENT_UIDS}")
        return cls(int(match.group(1)), int(match.group(2)))


DEFAULT_AGENT_UIDS: Final = AgentUids(1_700_000_000, 1_700_999_999)
"""Far above login users, subordinate-uid ranges (100000 + 65536·n) and systemd's dynamic users."""


class UidRegistry:
    """The session -> uid table of one workdir (see the module docstring); thread-safe, and safe
    across processes on the same workdir (a file lock around each allocation)."""

    def __init__(self, workdir: Path, uids: AgentUids) -> None:
        self.uids = uids
        self._dir = workdir / "agent-uids"
        self._held: dict[str, AgentUser] = {}
        self._lock = threading.Lock()

    def user(self, session_id: str) -> AgentUser:
        """The session's agent user, allocated on first use."""
        with self._lock:
            held = self._held.get(session_id)
            if held is None:
                held = self._held[session_id] = self._allocate(session_id)
            return held

    def release(self, session_id: str) -> None:
        """The session is deleted: its entry goes (its uid is not handed out again)."""
        with self._lock:
            self._held.pop(session_id, None)
            (self._dir / session_id).unlink(missing_ok=True)

    def _allocate(self, session_id: str) -> AgentUser:
        self._dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        self._dir.chmod(0o700)
        entry = self._dir / session_id
        with (self._dir / ".lock").open("a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            uid = _read_uid(entry)
            if uid is None or not self.uids.first <= uid <= self.uids.last:
                uid = max(_read_uid(self._dir / "next") or self.uids.first, self.uids.first)
                if uid > self.uids.last:
                    raise RunError(
                        f"every agent uid of {self.uids} has been handed out (one per session, never "
                        "reused): restart the server with a wider or another --agent-uids range"
                    )
                _write(self._dir / "next", uid + 1)
                _write(entry, uid)
        return AgentUser(uid=uid, gid=uid)


def _read_uid(path: Path) -> int | None:
    try:
        text = path.read_text(encoding="ascii").strip()
    except (OSError, UnicodeDecodeError):
        return None
    return int(text) if text.isdigit() else None


def _write(path: Path, uid: int) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
    with os.fdopen(fd, "w", encoding="ascii") as handle:
        handle.write(f"{uid}\n")
    os.replace(tmp, path)
