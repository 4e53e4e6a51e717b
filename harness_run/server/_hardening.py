"""What ``harness-run serve`` does so the agents of its local engines cannot reach it: the server
process is not dumpable, the store's files are the server user's only, and each session's agent
runs as a uid of its own (``runtime/local/_agent_uids.py``) when the server may switch users.

Non-dumpable: ``/proc/<server>/environ``, ``mem`` and ptrace are closed to every process without
``CAP_SYS_PTRACE`` — including processes of the server's own uid (a ``workspace.host_dir`` turn,
``exec`` on a server that cannot switch users) — so the operator's model key in the server's
environment is not read through ``/proc``.
"""

from __future__ import annotations

import ctypes
import logging
import os
import stat
import sys
from collections.abc import Collection
from pathlib import Path
from typing import Final

from harness_run.errors import UsageError
from harness_run.runtime.local import DEFAULT_AGENT_UIDS, AgentUids

__all__ = [
    "agent_uids_for_serve",
    "can_switch_users",
    "check_local_agents",
    "make_undumpable",
    "private_store",
]

log = logging.getLogger("harness_run.server")

_PR_SET_DUMPABLE: Final = 4
_PR_GET_DUMPABLE: Final = 3
# CAP_CHOWN, CAP_DAC_OVERRIDE, CAP_FOWNER, CAP_SETGID, CAP_SETUID: spawn as, hand over to, read back
_SWITCH_CAPS: Final = (1 << 0) | (1 << 1) | (1 << 3) | (1 << 6) | (1 << 7)
_STORE_FILES: Final = ("history.sqlite3", "history.sqlite3-wal", "history.sqlite3-shm", "blobs")
OFF: Final = "off"


def make_undumpable() -> bool:
    """``prctl(PR_SET_DUMPABLE, 0)`` for this process (Linux; elsewhere nothing): True when set.
    Call it at start, before any secret is read into memory that a same-uid process could dump."""
    if not sys.platform.startswith("linux"):
        return False
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(_PR_SET_DUMPABLE, 0, 0, 0, 0) != 0:
        log.warning("could not make the server non-dumpable (errno %d)", ctypes.get_errno())
        return False
    return libc.prctl(_PR_GET_DUMPABLE, 0, 0, 0, 0) == 0


def can_switch_users() -> bool:
    """Whether this process may run the agent as other uids and hand files over to them: root, or
    the effective capabilities CHOWN, DAC_OVERRIDE, FOWNER, SETGID and SETUID."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        status = Path("/proc/self/status").read_text(encoding="ascii", errors="replace")
    except OSError:
        return os.geteuid() == 0
    for line in status.splitlines():
        if line.startswith("CapEff:"):
            return int(line.split()[1], 16) & _SWITCH_CAPS == _SWITCH_CAPS
    return os.geteuid() == 0


def agent_uids_for_serve(flag: str | None) -> AgentUids | None:
    """``serve --agent-uids FIRST-LAST|off``: the uids the local engines' agents run as, one per
    session. Unset: :data:`DEFAULT_AGENT_UIDS` when this process may switch users, else None (the
    agent shares the server's uid; the caller decides what it then serves). ``off``: None. A range
    this process cannot switch to is a :class:`UsageError`."""
    if flag is not None and flag.strip().lower() == OFF:
        return None
    if flag is None:
        return DEFAULT_AGENT_UIDS if can_switch_users() else None
    uids = AgentUids.parse(flag)
    if not can_switch_users():
        raise UsageError(
            f"--agent-uids {uids}: the server (uid {os.geteuid()}) cannot run processes as other "
            "users; start it as root (or with CAP_SETUID, CAP_SETGID, CAP_CHOWN, CAP_FOWNER and "
            "CAP_DAC_OVERRIDE), or pass --agent-uids off to run agents as the server's own user"
        )
    return uids


def check_local_agents(local: Collection[str], uids: AgentUids | None, flag: str | None) -> None:
    """``serve``'s security default for the agents of the ``local`` engines it would serve (their
    names): with ``uids`` each session's agent has a uid of its own, nothing to check. Without,
    the agents would run as the server's own user and reach everything the server can (the store,
    the server secret: they could mint API keys). That needs ``--agent-uids off`` (logged as a
    warning); otherwise a :class:`UsageError` naming both ways out."""
    if uids is not None or not local:
        return
    names = ", ".join(sorted(local))
    reach = "the store and the server secret (~/.config/harness-run/server-secret), i.e. mint API keys"
    if flag is not None and flag.strip().lower() == OFF:
        log.warning(
            "--agent-uids off: the agents of %s run as this server's user (uid %d) and can read %s; "
            "only for a server you alone use",
            names,
            os.geteuid(),
            reach,
        )
        return
    raise UsageError(
        f"serve would run the agents of the local engine(s) {names} as this server's own user "
        f"(uid {os.geteuid()}, which cannot switch users): an agent could then read {reach}. "
        "Run serve as root (or with CAP_SETUID, CAP_SETGID, CAP_CHOWN, CAP_FOWNER and "
        "CAP_DAC_OVERRIDE) so each session's agent gets a uid of its own, or pass --agent-uids off "
        "to run the agents as this user (only for a server you alone use)"
    )


def private_store(root: Path) -> list[Path]:
    """The SQLite store at ``root`` made the server user's only — its database files and blobs
    lose every group and other permission (a store made by an older version, or a directory the
    operator made, may have them) and ``root`` itself is not listable by others (it stays
    searchable: the sessions' workspaces are under it). Returns the paths changed."""
    changed: list[Path] = []
    if _strip(root, keep=stat.S_IXOTH | stat.S_IXGRP):
        changed.append(root)
    for name in _STORE_FILES:
        top = root / name
        if not top.exists() or top.is_symlink():
            continue
        paths = [top, *top.rglob("*")] if top.is_dir() else [top]
        changed.extend(path for path in paths if not path.is_symlink() and _strip(path, keep=0))
    return changed


def _strip(path: Path, *, keep: int) -> bool:
    """Group and other permissions off ``path`` (but ``keep``); True when something changed."""
    try:
        mode = stat.S_IMODE(path.lstat().st_mode)
        wanted = mode & ~0o077 | mode & keep
        if wanted == mode:
            return False
        path.chmod(wanted)
    except OSError:
        return False
    return True
