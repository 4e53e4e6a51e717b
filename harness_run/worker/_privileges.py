"""The worker's uid and capabilities: the agent's processes run as another uid than the worker.

The container and sandbox runtimes start the image's worker as root with only
``vocab.k8s.WORKER_CAPABILITIES`` (and no-new-privileges) and name the agent's uid in
``$HARNESS_RUN_AGENT_UID``. :func:`drop_privileges` then becomes the image's user
(``vocab.k8s.AGENT_UID``, owner of the store and the worker's files) keeping those capabilities,
sets the worker non-dumpable (``/proc/<worker>/environ``, ``mem`` and ptrace are closed to every
process without ``CAP_SYS_PTRACE``, which nobody here has) and its umask to 077, and returns the
agent's :class:`~harness_run.runtime.AgentUser`. Without the variable the agent shares the
worker's uid, as on the local runtime (the worker is still non-dumpable).
"""

from __future__ import annotations

import ctypes
import os
import sys
from collections.abc import Mapping
from typing import Final

from harness_run.errors import UsageError
from harness_run.runtime import AgentUser
from harness_run.vocab.k8s import AGENT_UID, AGENT_UID_ENV, WORKER_CAPABILITIES

__all__ = ["drop_privileges"]

_PR_SET_DUMPABLE: Final = 4
_PR_SET_KEEPCAPS: Final = 8
_CAPABILITY_V3: Final = 0x20080522
_CAP_NUMBERS: Final = {"CHOWN": 0, "DAC_OVERRIDE": 1, "FOWNER": 3, "KILL": 5, "SETGID": 6, "SETUID": 7}
# held only to install the agent's network rules as root (``_agent_net``): never kept past the switch
_SETUP_ONLY: Final = (1 << 12) | (1 << 13)  # CAP_NET_ADMIN, CAP_NET_RAW
_GITCONFIG: Final = "/etc/gitconfig"
_SAFE: Final = "[safe]\n\tdirectory = *\n"
_HOW: Final = (
    "start the worker as root with only the capabilities " + ", ".join(WORKER_CAPABILITIES) + " and "
    "no-new-privileges (the container and sandbox runtimes do), or unset " + AGENT_UID_ENV
)


class _Header(ctypes.Structure):
    _fields_ = (("version", ctypes.c_uint32), ("pid", ctypes.c_int))


class _Data(ctypes.Structure):
    _fields_ = (
        ("effective", ctypes.c_uint32),
        ("permitted", ctypes.c_uint32),
        ("inheritable", ctypes.c_uint32),
    )


def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)


def _raise_effective(libc: ctypes.CDLL) -> int:
    """Effective capabilities := permitted (kept across the uid change) minus the network set-up
    ones, which leave the permitted set too; the set, as a mask."""
    header, data = _Header(_CAPABILITY_V3, 0), (_Data * 2)()
    if libc.capget(ctypes.byref(header), data) != 0:
        raise OSError(ctypes.get_errno(), "capget failed")
    data[0].permitted &= ~_SETUP_ONLY
    data[0].inheritable &= ~_SETUP_ONLY
    data[0].effective, data[1].effective = data[0].permitted, data[1].permitted
    if libc.capset(ctypes.byref(header), data) != 0:
        raise OSError(ctypes.get_errno(), "capset failed")
    return int(data[0].effective)


def _trust_agent_repositories() -> None:
    """The worker commits, checks and cleans repositories the agent owns: git refuses a repository
    of another owner ("dubious ownership") unless a protected config says otherwise."""
    try:
        with open(_GITCONFIG, encoding="utf-8") as handle:
            if _SAFE in handle.read():
                return
    except OSError:
        pass
    try:
        with open(_GITCONFIG, "a", encoding="utf-8") as handle:
            handle.write(_SAFE)
    except OSError:
        return  # git then names the repository in its error


def drop_privileges(env: Mapping[str, str]) -> AgentUser | None:
    """See the module docstring; a :class:`UsageError` when the agent's uid is asked for but the
    worker cannot run processes as it (fail closed: no turn runs as the worker's uid)."""
    if not sys.platform.startswith("linux"):
        return None
    libc = _libc()
    raw = env.get(AGENT_UID_ENV, "").strip()
    if not raw:
        libc.prctl(_PR_SET_DUMPABLE, 0, 0, 0, 0)
        return None
    if not raw.isdigit() or int(raw) == 0:
        raise UsageError(f"{AGENT_UID_ENV}={raw!r} must be a user id other than 0, e.g. 1001")
    agent = int(raw)
    try:
        if os.getuid() == 0:
            _trust_agent_repositories()
            libc.prctl(_PR_SET_KEEPCAPS, 1, 0, 0, 0)
            os.setgroups([agent])  # the agent's group: its files (umask 007) are the worker's too
            os.setresgid(AGENT_UID, AGENT_UID, AGENT_UID)
            os.setresuid(AGENT_UID, AGENT_UID, AGENT_UID)
            libc.prctl(_PR_SET_KEEPCAPS, 0, 0, 0, 0)
        mask = _raise_effective(libc)
    except OSError as exc:
        raise UsageError(f"the worker cannot keep the capabilities it needs ({exc}); {_HOW}") from None
    missing = [name for name in ("SETUID", "SETGID", "KILL") if not mask >> _CAP_NUMBERS[name] & 1]
    if missing:
        raise UsageError(
            f"the worker (uid {os.getuid()}) cannot run the agent as uid {agent}: it lacks "
            f"CAP_{', CAP_'.join(missing)}; {_HOW}"
        )
    if agent == os.getuid():
        raise UsageError(f"{AGENT_UID_ENV}={agent} is the worker's own uid; use another, e.g. 1001")
    libc.prctl(_PR_SET_DUMPABLE, 0, 0, 0, 0)
    os.umask(0o077)
    return AgentUser(uid=agent, gid=agent)
