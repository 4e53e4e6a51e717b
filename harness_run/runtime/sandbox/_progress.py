"""Progress lines for long deploy steps (build, push, apply, pool ready)."""

from __future__ import annotations

import sys
import time
from typing import TextIO

__all__ = ["Progress"]


class Progress:
    """Prints ``[harness-run] step: detail (1.2 s)`` lines to stderr, or nothing when disabled."""

    def __init__(self, enabled: bool, stream: TextIO | None = None) -> None:
        self.enabled = enabled
        self.stream = stream
        self._started = time.monotonic()
        self.steps: list[tuple[str, str, float]] = []

    def step(self, name: str, detail: str) -> None:
        elapsed = time.monotonic() - self._started
        self.steps.append((name, detail, elapsed))
        if self.enabled:
            out = self.stream or sys.stderr
            print(f"[harness-run] {name}: {detail} ({elapsed:.1f} s)", file=out, flush=True)

    def log(self, line: str) -> None:
        """A build log line: shown only when a step runs long (kept quiet by default)."""
        if self.enabled and line.startswith("Step "):
            print(f"[harness-run]   {line}", file=self.stream or sys.stderr, flush=True)
