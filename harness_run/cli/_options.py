"""Options shared by several commands."""

from __future__ import annotations

import argparse
import gc
import os
from pathlib import Path

from harness_run.errors import UsageError

__all__ = ["add_workdir", "secrets_from_env", "settle_memory"]


def add_workdir(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--workdir",
        type=Path,
        default=None,
        help="where sessions and history live (default: $HARNESS_RUN_HOME or ~/.local/share/harness-run)",
    )


def secrets_from_env(names: list[str]) -> dict[str, str]:
    """``--secret NAME`` takes the value of the environment variable NAME (never from argv)."""
    secrets: dict[str, str] = {}
    for name in names:
        if "=" in name:
            raise UsageError(
                f"--secret takes a NAME, not a value ({name.split('=', 1)[0]}=…); export the "
                "value in the environment and pass --secret NAME"
            )
        if name not in os.environ:
            raise UsageError(f"--secret {name}: the environment variable {name} is not set; export it first")
        secrets[name] = os.environ[name]
    return secrets


def settle_memory() -> None:
    """Turn the garbage collector back on (``fast_exit`` commands start with it off), with what
    start-up built frozen: those objects live until exit and are never scanned again."""
    gc.freeze()
    gc.enable()
