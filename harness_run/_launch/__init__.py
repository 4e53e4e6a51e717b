"""Spawn first's machinery, standard library only: a fresh ``harness-run run`` imports it before
asyncio or pydantic, so it imports nothing else of ``harness_run`` (the bottom layer).

- :mod:`~harness_run._launch._cache` — the launch-plan cache: where entries live, their key, format,
  placeholders; read and written.
- :mod:`~harness_run._launch._spawn` — :func:`spawn_raw` (``os.posix_spawn``, no asyncio or
  ``subprocess``), and the reaper's command line and spawn.
- :mod:`~harness_run._launch._reaper` — the reaper: a script run by its path (``python -I -S``),
  never imported, that ends a turn's processes if their client dies.
- :mod:`~harness_run._launch._adopt` — :func:`adopt`: a process spawned before the event loop,
  handed to it. It imports asyncio, so it is loaded on first use of its names.
"""

from typing import TYPE_CHECKING, Any

from harness_run._launch._cache import (
    FORMAT,
    GUARD_SOCKET,
    GUARD_TOKEN,
    PROMPT,
    PROXY,
    SESSION,
    LaunchEntry,
    Resolved,
    cache_key,
    entry_path,
    fill,
    load,
    mark,
    store,
    templatize,
    token,
)
from harness_run._launch._spawn import READ_LIMIT, TURN_ENV, RawChild, reaper_argv, spawn_raw, spawn_reaper

if TYPE_CHECKING:
    from harness_run._launch._adopt import AdoptedProcess, adopt

# the launch-plan cache
__all__ = ["FORMAT", "LaunchEntry", "Resolved", "cache_key", "entry_path", "fill", "load", "mark"]
__all__ += ["store", "templatize", "token"]
__all__ += ["GUARD_SOCKET", "GUARD_TOKEN", "PROMPT", "PROXY", "SESSION"]
# spawning, and the reaper
__all__ += ["READ_LIMIT", "TURN_ENV", "RawChild", "reaper_argv", "spawn_raw", "spawn_reaper"]
# adoption by the event loop (imports asyncio: loaded on first use)
__all__ += ["AdoptedProcess", "adopt"]

_LAZY = dict.fromkeys(["AdoptedProcess", "adopt"], "harness_run._launch._adopt")


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        value = getattr(importlib.import_module(_LAZY[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'harness_run._launch' has no attribute {name!r}")
