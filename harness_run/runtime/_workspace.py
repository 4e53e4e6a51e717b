"""Runtime-neutral workspace rules: checking a session's ``WorkspaceOptions`` (host directories
resolved and confined) and the workspace lock that makes turns in one workspace take turns."""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import os
import time
from collections.abc import Callable
from pathlib import Path

from harness_run.errors import UsageError
from harness_run.spec import WorkspaceOptions

__all__ = ["WorkspaceLock", "check_workspace", "resolve_host_dir"]

LOCK_POLL = 0.05
"""Seconds between tries of a busy workspace lock."""


def resolve_host_dir(text: str, *, workdir: Path | None) -> Path:
    """``workspace.host_dir`` as an absolute, resolved directory, or a UsageError naming the field.

    Refused: a path that does not exist or is not a directory, ``/``, the home directory itself, and
    a directory that is or holds harness-run's ``workdir`` (pruning it would delete the user's files,
    and the agent would see every session's history)."""
    field = "workspace.host_dir"
    if "\0" in text or not text.strip():
        raise UsageError(f"{field} {text!r} is not a usable path; give an existing directory")
    path = Path(text).expanduser()
    if not path.is_absolute():
        path = Path.cwd() / path
    path = path.resolve()
    if not path.exists():
        raise UsageError(f"{field} {path} does not exist; create the directory first or fix the path")
    if not path.is_dir():
        raise UsageError(f"{field} {path} is a file; give the directory the agent should work in")
    if path == Path(path.anchor):
        raise UsageError(f"{field} {path} is the root directory; give a project directory instead")
    if path == Path.home().resolve():
        raise UsageError(f"{field} {path} is your home directory itself; give a project directory inside it")
    if workdir is not None:
        root = workdir.resolve()
        if root == path or root.is_relative_to(path) or path.is_relative_to(root):
            raise UsageError(
                f"{field} {path} overlaps harness-run's workdir {root}; give a directory outside it "
                "(and not one of its parents)"
            )
    return path


def check_workspace(options: WorkspaceOptions, *, workdir: Path | None) -> WorkspaceOptions:
    """``options`` with ``host_dir`` resolved (see :func:`resolve_host_dir`)."""
    if options.host_dir is None:
        return options
    resolved = str(resolve_host_dir(options.host_dir, workdir=workdir))
    return options.model_copy(update={"host_dir": resolved})


class WorkspaceLock:
    """An exclusive lock on one workspace (``flock`` on a file beside it), held by a turn from before
    its workspace is prepared until its result is stored. Works across processes on one machine and
    within one process (each lock opens the file anew). ``owner`` is written into the file, so a
    waiting turn can say whom it waits for."""

    def __init__(self, path: Path, owner: str) -> None:
        self.path = path
        self.owner = owner
        self._fd: int | None = None

    @property
    def held(self) -> bool:
        return self._fd is not None

    def try_acquire(self) -> bool:
        """Take the lock if it is free (never blocks)."""
        if self._fd is not None:
            return True
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return False
        os.ftruncate(fd, 0)
        os.pwrite(fd, self.owner.encode(), 0)
        self._fd = fd
        return True

    def busy(self) -> bool:
        """Whether a turn holds the lock now (a look: nothing is written)."""
        try:
            fd = os.open(self.path, os.O_RDONLY)
        except OSError:
            return False
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        finally:
            os.close(fd)
        return False

    def last_used(self) -> float | None:
        """When a turn last released the lock (the file's mtime), None when it was never taken."""
        try:
            return self.path.stat().st_mtime
        except OSError:
            return None

    def holder(self) -> str:
        """Who holds it, as its owner wrote (empty when unknown)."""
        try:
            return self.path.read_text(errors="replace").strip()
        except OSError:
            return ""

    async def acquire(self, on_wait: Callable[[str], None] | None = None) -> None:
        """Take the lock, waiting (cancellably) while another turn holds it; ``on_wait(holder)`` is
        called once when it has to wait."""
        told = False
        while not self.try_acquire():
            if not told and on_wait is not None:
                on_wait(self.holder())
                told = True
            await asyncio.sleep(LOCK_POLL)

    def release(self) -> None:
        fd, self._fd = self._fd, None
        if fd is None:
            return
        with contextlib.suppress(OSError):
            os.ftruncate(fd, 0)
            now = time.time()
            os.utime(fd, (now, now))  # the workspace's last use: retention counts from it
            fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)
