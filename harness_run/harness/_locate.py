"""Finding a harness binary: an explicit path, an env override, a pinned wheel, then PATH."""

from __future__ import annotations

import os
import shutil
from importlib.util import find_spec
from pathlib import Path

from harness_run.errors import HarnessNotFoundError

__all__ = ["BinarySource", "in_wheel"]


def _executable(path: str | Path) -> bool:
    return Path(path).is_file() and os.access(path, os.X_OK)


def in_wheel(package: str, relative: str) -> str | None:
    """``<package dir>/<relative>`` if it is an executable file — found without importing ``package``."""
    try:
        found = find_spec(package)
    except (ImportError, ValueError):
        return None
    for location in (found.submodule_search_locations or []) if found else []:
        candidate = Path(location) / relative
        if _executable(candidate):
            return str(candidate)
    return None


class BinarySource:
    """Where one harness CLI comes from, in order: ``override`` (an engine's ``*_binary=``), the
    environment variable ``env_var``, the binary inside the pinned wheel, then ``command`` on PATH."""

    def __init__(
        self, *, label: str, command: str, env_var: str, package: str, relative: str, hint: str
    ) -> None:
        self.label, self.command, self.env_var = label, command, env_var
        self.package, self.relative, self.hint = package, relative, hint

    def bundled(self) -> str | None:
        return in_wheel(self.package, self.relative)

    def locate(self, override: str | None = None) -> str:
        for candidate in (override, os.environ.get(self.env_var)):
            if candidate:
                if _executable(candidate):
                    return candidate
                problem = f"the {self.command} binary {candidate!r} does not exist or is not executable"
                raise HarnessNotFoundError(f"{problem}; {self.hint}")
        found = self.bundled() or shutil.which(self.command)
        if not found:
            raise HarnessNotFoundError(f"{self.label} (`{self.command}`) is not installed; {self.hint}")
        return found
