"""Where sessions and history live: the default workdir (``$HARNESS_RUN_HOME``, else
``$XDG_DATA_HOME/harness-run`` or ``~/.local/share/harness-run``) and a workdir argument made absolute.
Standard library only (``harness-run run`` finds its launch-plan cache there before anything else)."""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["default_workdir", "resolve_workdir"]


def default_workdir() -> Path:
    if os.environ.get("HARNESS_RUN_HOME"):
        return Path(os.environ["HARNESS_RUN_HOME"])
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "harness-run"


def resolve_workdir(workdir: str | Path) -> Path:
    """``workdir`` as an absolute path (``~`` expanded, relative to the current directory): every
    harness runs in another directory, so a relative path would point elsewhere for it. Raises
    UsageError when it cannot be a directory."""
    from harness_run.errors import UsageError

    text = str(workdir)
    if not text.strip() or "\0" in text:
        raise UsageError(f"workdir {text!r} is not a usable path; pass a directory (e.g. workdir='./runs')")
    path = Path(text).expanduser().resolve()
    if path.exists() and not path.is_dir():
        raise UsageError(f"workdir {path} is a file, not a directory; pass a directory for the store")
    return path
