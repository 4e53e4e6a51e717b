"""The agent's own uid: the runtime runs the harness CLI, its tools and ``exec`` commands as another
user than itself (the in-image worker does; the local runtime keeps one uid) and hands the
session's files over to that user before each spawn.

The worker keeps ``CAP_SETUID``/``CAP_SETGID`` (to spawn as the agent), ``CAP_KILL`` (to stop it),
``CAP_CHOWN``/``CAP_FOWNER`` (to hand files over) and ``CAP_DAC_OVERRIDE`` (to read and write the
agent's files for checkpoints, commits and restores). The agent's processes get none: the kernel
clears a non-root process's capabilities at ``execve`` (no file capabilities under
no-new-privileges, no ambient set).
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["AgentUser"]


@dataclass(frozen=True, slots=True)
class AgentUser:
    """The uid/gid the agent's processes run as."""

    uid: int
    gid: int

    def spawn_kwargs(self) -> dict[str, Any]:
        """``subprocess``/``asyncio`` keyword arguments that start a process as this user: no
        supplementary groups, umask 007 — its files are its group's too, and the worker is in that
        group, so the worker's own git (a child without capabilities) reads and commits them."""
        return {"user": self.uid, "group": self.gid, "extra_groups": [], "umask": 0o007}

    def hand_over(self, *trees: Path) -> None:
        """Every directory and file under ``trees`` owned by the agent (and its group, with the
        owner's permissions), and every ancestor directory of them searchable (``o+x``, not
        listable) so the agent reaches them.

        Walks with directory descriptors and never follows a symbolic link (an agent that swaps a
        directory for a link mid-walk cannot redirect a chown); a file with several hard links is
        left alone (a link to a file of the worker's must not hand that file over)."""
        for tree in trees:
            if not tree.exists():
                continue
            for parent in reversed(tree.parents):
                _searchable(parent)
            self._own(tree, None, tree.is_dir())
            if not tree.is_dir() or tree.is_symlink():
                continue
            for _top, dirs, files, fd in os.fwalk(tree, follow_symlinks=False):
                for name in (*dirs, *files):
                    self._own(Path(name), fd, name in dirs)

    def _own(self, path: Path, dir_fd: int | None, is_dir: bool) -> None:
        """Through a descriptor opened without following a link, so what is checked is what is
        changed: directories and single-link regular files only (links, devices, FIFOs are left)."""
        try:  # the common case, nothing to change, without opening anything
            seen = os.stat(path, dir_fd=dir_fd, follow_symlinks=False)
        except OSError:
            return
        if (seen.st_uid == self.uid and seen.st_gid == self.gid) or stat.S_ISLNK(seen.st_mode):
            return
        flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC | (os.O_DIRECTORY if is_dir else 0)
        try:
            fd = os.open(path, flags, dir_fd=dir_fd)
        except OSError:
            return
        try:
            info = os.fstat(fd)
            if not (stat.S_ISDIR(info.st_mode) or (stat.S_ISREG(info.st_mode) and info.st_nlink == 1)):
                return
            if info.st_uid == self.uid and info.st_gid == self.gid:
                return
            os.fchown(fd, self.uid, self.gid)
            mode = stat.S_IMODE(info.st_mode)  # the group (the worker's children) as the owner
            os.fchmod(fd, mode | (mode & 0o700) >> 3)
        except OSError:
            return
        finally:
            os.close(fd)


def _searchable(directory: Path) -> None:
    try:
        mode = os.stat(directory).st_mode
        if not mode & stat.S_IXOTH:
            os.chmod(directory, stat.S_IMODE(mode) | stat.S_IXOTH)
    except OSError:
        return
