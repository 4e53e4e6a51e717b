"""Start a process without asyncio or ``subprocess`` (a fresh ``harness-run run`` spawns the harness
before it imports either), and the reaper that ends a turn's processes if their client dies.

The reaper is the script ``_reaper.py`` next to this module, run by its path with ``python -I -S``:
it starts in milliseconds, without importing the package.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

if TYPE_CHECKING:
    import asyncio

__all__ = ["READ_LIMIT", "TURN_ENV", "RawChild", "reaper_argv", "spawn_raw", "spawn_reaper"]

READ_LIMIT: Final = 64 * 1024 * 1024
"""The harness's stdout/stderr read limit (stream-json lines carry whole tool outputs)."""
TURN_ENV: Final = "HARNESS_RUN_TURN"
"""Set (to a random tag) in the environment of a turn's harness process, inherited by its tools:
the reaper ends every process carrying it."""
_REAPER: Final = Path(__file__).resolve().with_name("_reaper.py")
_HAS_PROC: Final = os.path.isdir("/proc/self")


class RawChild:
    """A process started by :func:`spawn_raw`: its pid and the parent's ends of its pipes (None:
    closed), for the event loop to take over (:func:`~harness_run._launch.adopt`)."""

    __slots__ = ("close_stdin", "pending", "pid", "stderr", "stdin", "stdout")

    def __init__(self, pid: int, stdin: int | None, stdout: int | None, stderr: int | None) -> None:
        self.pid, self.stdin, self.stdout, self.stderr = pid, stdin, stdout, stderr
        self.pending = b""
        """What of ``stdin``'s bytes did not fit in the pipe at the spawn (written once adopted)."""
        self.close_stdin = False
        """Close ``stdin`` once ``pending`` is written (it was not to be kept open)."""


def spawn_raw(
    argv: Sequence[str],
    *,
    cwd: str | None,
    env: Mapping[str, str],
    stdin: bytes = b"",
    keep_stdin_open: bool = False,
    output: bool = True,
) -> RawChild:
    """Start ``argv`` in a session of its own (like ``start_new_session=True``) with pipes for stdin
    and (``output``) stdout/stderr, else /dev/null, without asyncio or subprocess: a fresh ``harness-run
    run`` spawns the harness before it imports either. ``stdin`` is written as far as the pipe
    takes it; the pipe is closed after it unless ``keep_stdin_open`` or something is pending.
    Call only while this process has one thread (the working directory is changed around the
    spawn). Raises OSError (FileNotFoundError for a missing binary or ``cwd``)."""
    import signal

    program = _exec_path(argv[0], env.get("PATH", os.defpath))
    pipes: list[int] = []
    try:
        child_in, parent_in = os.pipe()
        pipes += [child_in, parent_in]
        if output:
            parent_out, child_out = os.pipe()
            parent_err, child_err = os.pipe()
            pipes += [parent_out, child_out, parent_err, child_err]
        else:
            null = os.open(os.devnull, os.O_WRONLY)
            pipes.append(null)
            parent_out = parent_err = None
            child_out = child_err = null
        actions = [
            (os.POSIX_SPAWN_DUP2, child_in, 0),
            (os.POSIX_SPAWN_DUP2, child_out, 1),
            (os.POSIX_SPAWN_DUP2, child_err, 2),
        ]
        here = os.getcwd() if cwd else None
        if cwd:
            os.chdir(cwd)
        try:
            pid = os.posix_spawn(
                program,
                list(argv),
                dict(env),
                file_actions=actions,
                setsid=True,
                setsigdef=(signal.SIGPIPE, signal.SIGXFSZ),  # as subprocess's restore_signals
            )
        finally:
            if here is not None:
                os.chdir(here)
    except BaseException:
        for fd in pipes:
            os.close(fd)
        raise
    for fd in dict.fromkeys((child_in, child_out, child_err)):  # the child's ends: its own now
        os.close(fd)
    child = RawChild(pid, parent_in, parent_out, parent_err)
    if stdin:
        os.set_blocking(parent_in, False)
        try:
            written = os.write(parent_in, stdin)
        except BlockingIOError:
            written = 0
        except OSError:  # it is gone already: its exit says why
            written = len(stdin)
        os.set_blocking(parent_in, True)
        child.pending = stdin[written:]
    if not keep_stdin_open and not child.pending:
        os.close(parent_in)
        child.stdin = None
    child.close_stdin = not keep_stdin_open
    return child


def reaper_argv(pid: int, tag: str) -> list[str] | None:
    """The watchdog's command line (``_reaper.py``, see :func:`spawn_reaper`); None where it
    cannot run (no ``/proc``)."""
    if not _HAS_PROC:
        return None
    return [sys.executable, "-I", "-S", str(_REAPER), str(pid), tag]


async def spawn_reaper(
    pid: int, tag: str, env: Mapping[str, str], **kwargs: Any
) -> asyncio.subprocess.Process | None:
    """The watchdog (``_reaper.py``) that ends a turn's processes (group ``pid``, processes
    carrying ``tag``) if the process that started them dies first; None where it cannot run (no
    ``/proc``). ``kwargs`` go to the spawn (e.g. another uid's)."""
    argv = reaper_argv(pid, tag)
    if argv is None:
        return None
    import asyncio

    return await asyncio.create_subprocess_exec(
        *argv,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.DEVNULL,
        start_new_session=True,  # a signal to the starting process's group does not reach it
        env=dict(env),
        **kwargs,
    )


def _exec_path(program: str, path: str) -> str:
    """``program`` as ``execvpe`` would find it on ``path`` (a name without ``/``)."""
    if "/" in program:
        return program
    for folder in path.split(os.pathsep):
        candidate = os.path.join(folder or ".", program)
        if os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return candidate
    raise FileNotFoundError(2, "No such file or directory", program)
