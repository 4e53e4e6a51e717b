"""Warm harness processes: a session's CLI kept between its turns, and a pool of CLIs started ahead
of the sessions that will claim them.

A CLI that reads its prompts from stdin (Claude Code's stream-json input) does not exit after its
result line when the turn may keep it: it is *parked* here with its turn credentials, which hold
no key while it waits (``TurnCredentials.end_turn``). The session's next turn takes it back when
the new turn's launch plan is the one it was started with (same argv apart from the session flag,
environment, config files and working directory: :func:`fingerprint`), writes the prompt to it and
binds that turn's keys to the same proxy tokens. Anything else (another plan, a dead process,
another event loop, a turn run elsewhere meanwhile) ends it, and the turn starts a fresh one.

Parked processes go after ``idle_ttl`` seconds, and the least recently used first when more than
``max_idle`` are parked. A *pooled* process was started for a session id that no session has yet:
:meth:`WarmProcesses.claim` hands that id to a new session, whose first turn adopts it.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import os
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from harness_run.errors import UsageError
from harness_run.harness import LaunchPlan
from harness_run.runtime._process import Spawned, end_kept, end_kept_now, kept_alive, memory_kb
from harness_run.security import TurnCredentials

__all__ = [
    "DEFAULT_IDLE_TTL",
    "DEFAULT_MAX_IDLE",
    "Warm",
    "WarmProcess",
    "WarmProcesses",
    "check_warm",
    "end_warm",
    "fingerprint",
    "holds_secret",
]

DEFAULT_IDLE_TTL = 30.0
"""Seconds a session's harness process is kept after its turn."""
DEFAULT_MAX_IDLE = 4
"""Parked harness processes per engine (the least recently used go first)."""

_SESSION_FLAGS = ("--session-id", "--resume", "--session")


def check_warm(idle_ttl: float, max_idle_processes: int, warm_pool: int) -> float:
    """The engine's warm-process settings checked (UsageError naming the field); ``idle_ttl``."""
    if not isinstance(idle_ttl, int | float) or isinstance(idle_ttl, bool) or idle_ttl < 0:  # pyright: ignore[reportUnnecessaryIsInstance]
        raise UsageError(f"idle_ttl={idle_ttl!r} must be a number of seconds >= 0 (0: a process per turn)")
    for name, value in (("max_idle_processes", max_idle_processes), ("warm_pool", warm_pool)):
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:  # pyright: ignore[reportUnnecessaryIsInstance]
            raise UsageError(f"{name}={value!r} must be a whole number >= 0")
    return float(idle_ttl)


def holds_secret(plan: LaunchPlan, forms: list[str]) -> bool:
    """Whether a secret value (any of its ``forms``) is in the plan's argv, environment or files."""
    texts = [*plan.argv, *plan.env.values(), *plan.files.values()]
    return any(form and form in text for form in forms for text in texts)


def fingerprint(plan: LaunchPlan, cwd: Path) -> str:
    """What a harness process was started with, apart from the turn: argv without the session flag
    (``--session-id X`` on a first turn, ``--resume X`` after), the environment, the config files
    and the working directory (its path and inode). Two turns with the same fingerprint can share
    one process."""
    argv: list[str] = []
    skip = False
    for arg in plan.argv:
        if skip:
            skip = False
            continue
        if arg in _SESSION_FLAGS:
            skip = True
            continue
        argv.append(arg)
    try:  # a workspace made again (restored from its checkpoint) is another directory
        inode = os.stat(cwd).st_ino
    except OSError:
        inode = 0
    body = {
        "argv": argv,
        "env": sorted(plan.env.items()),
        "files": sorted((str(path), text) for path, text in plan.files.items()),
        "cwd": [str(cwd), inode],
    }
    return hashlib.sha256(json.dumps(body, separators=(",", ":")).encode()).hexdigest()


@dataclass
class Warm:
    """A live harness process between turns (parked) or before its first (pooled)."""

    spawned: Spawned
    creds: TurnCredentials
    fingerprint: str
    session_id: str
    turns: int
    """The session's stored turns when it was parked: a turn run elsewhere meanwhile makes it stale."""
    state: Literal["parked", "pooled"]
    loop: asyncio.AbstractEventLoop
    since: float = field(default_factory=time.monotonic)
    timer: asyncio.TimerHandle | None = None

    @property
    def pid(self) -> int:
        return self.spawned.process.pid


@dataclass(frozen=True, slots=True)
class WarmProcess:
    """One warm harness process, as :meth:`LocalEngine.warm_processes` reports it."""

    pid: int
    session_id: str
    state: Literal["parked", "pooled"]
    idle_s: float
    """Seconds since it was parked (or started, pooled)."""
    memory_mb: float
    """Resident memory of the CLI and its children."""


class WarmProcesses:
    """The parked and pooled harness processes of one engine (in the event loop that made them)."""

    def __init__(self, idle_ttl: float, max_idle: int) -> None:
        self.idle_ttl = idle_ttl
        self.max_idle = max_idle
        self._parked: OrderedDict[str, Warm] = OrderedDict()  # least recently parked first
        self._pooled: dict[str, Warm] = {}
        self._ending: set[asyncio.Task[None]] = set()
        self._wardens: dict[asyncio.AbstractEventLoop, asyncio.Task[None]] = {}
        """Per event loop, a task that ends the loop's warm processes when the loop shuts down
        (``asyncio.run`` cancels it): their pipes and servers belong to that loop."""

    @property
    def keeps(self) -> bool:
        """Whether turns may keep their process at all."""
        return self.idle_ttl > 0 and self.max_idle > 0

    # --- parked ---------------------------------------------------------------------------------

    def _watch(self, loop: asyncio.AbstractEventLoop) -> None:
        if loop not in self._wardens or self._wardens[loop].done():
            self._wardens[loop] = loop.create_task(self._warden(loop))

    async def _warden(self, loop: asyncio.AbstractEventLoop) -> None:
        try:
            await loop.create_future()  # until the loop shuts down (or aclose)
        except asyncio.CancelledError:
            mine = [w for w in [*self._parked.values(), *self._pooled.values()] if w.loop is loop]
            for warm in mine:
                self._parked.pop(warm.session_id, None)
                self._pooled.pop(warm.session_id, None)
                if warm.timer is not None:
                    warm.timer.cancel()
            await asyncio.gather(*(_end_warm(w) for w in mine), return_exceptions=True)
            raise

    def park(self, warm: Warm) -> None:
        """Keep ``warm`` for its session's next turn; the oldest parked ones go over ``max_idle``."""
        self._watch(warm.loop)
        self._end(self._parked.pop(warm.session_id, None))
        warm.state, warm.since = "parked", time.monotonic()
        if warm.timer is not None:
            warm.timer.cancel()
        warm.timer = warm.loop.call_later(self.idle_ttl, self._expire, warm)
        self._parked[warm.session_id] = warm
        while len(self._parked) > self.max_idle:
            _, oldest = self._parked.popitem(last=False)
            self._end(oldest)

    def take(self, session_id: str, turns: int) -> Warm | None:
        """The session's parked (or pooled) process, if it can take the session's next turn: alive,
        in this event loop, and nothing ran in the session since it was kept. Otherwise it ends."""
        warm = self._parked.pop(session_id, None) or self._pooled.pop(session_id, None)
        if warm is None:
            return None
        if warm.timer is not None:
            warm.timer.cancel()
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            loop = None
        if loop is not warm.loop or warm.turns != turns or not kept_alive(warm.spawned):
            self._end(warm)
            return None
        return warm

    def _expire(self, warm: Warm) -> None:
        if self._parked.get(warm.session_id) is warm:
            del self._parked[warm.session_id]
            self._end(warm)

    # --- pooled ---------------------------------------------------------------------------------

    def pool(self, warm: Warm) -> None:
        self._watch(warm.loop)
        warm.state, warm.since = "pooled", time.monotonic()
        self._pooled[warm.session_id] = warm

    def pooled(self) -> int:
        return len(self._pooled)

    def claim(self) -> str | None:
        """A pooled session id for a new session, or None when the pool is empty. Its process
        waits for the session's first turn as a parked one does (``idle_ttl``, ``max_idle``)."""
        for session_id, warm in list(self._pooled.items()):
            del self._pooled[session_id]
            if kept_alive(warm.spawned):
                self.park(warm)
                return session_id
            self._end(warm)
        return None

    # --- ending ---------------------------------------------------------------------------------

    def end(self, session_id: str) -> None:
        """End the session's warm process, if any (the session is deleted or closed)."""
        self._end(self._parked.pop(session_id, None) or self._pooled.pop(session_id, None))

    def _end(self, warm: Warm | None) -> None:
        if warm is None:
            return
        if warm.timer is not None:
            warm.timer.cancel()
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is warm.loop and not warm.loop.is_closed():
            task = warm.loop.create_task(_end_warm(warm))
            self._ending.add(task)
            task.add_done_callback(self._ending.discard)
        else:  # another loop (or none): no await on its pipes; kill it by pid
            end_kept_now(warm.spawned)

    async def aclose(self) -> list[str]:
        """End every warm process and wait until they are gone; the pooled session ids (no session
        has them: their workspaces are the engine's to remove)."""
        pooled = list(self._pooled)
        for warm in [*self._parked.values(), *self._pooled.values()]:
            self._end(warm)
        self._parked.clear()
        self._pooled.clear()
        while self._ending:
            await asyncio.gather(*list(self._ending), return_exceptions=True)
        warden = self._wardens.pop(asyncio.get_running_loop(), None)
        if warden is not None:  # (another loop's ends with that loop)
            warden.cancel()
            await asyncio.gather(warden, return_exceptions=True)
        return pooled

    def close_now(self) -> list[str]:
        """End every warm process without waiting (``engine.close()``, ``aclose(kill=True)``): killed
        now; in their own running loop, their pipes and credentials are closed in the background.
        Returns the pooled session ids."""
        pooled = list(self._pooled)
        for warm in [*self._parked.values(), *self._pooled.values()]:
            end_kept_now(warm.spawned)
            self._end(warm)
        self._parked.clear()
        self._pooled.clear()
        return pooled

    def report(self) -> list[WarmProcess]:
        now = time.monotonic()
        return [
            WarmProcess(
                pid=w.pid,
                session_id=w.session_id,
                state=w.state,
                idle_s=round(now - w.since, 3),
                memory_mb=round(memory_kb(w.pid) / 1024, 1),
            )
            for w in [*self._parked.values(), *self._pooled.values()]
        ]


async def end_warm(warm: Warm) -> None:
    """End a warm process and its credentials."""
    await _end_warm(warm)


async def _end_warm(warm: Warm) -> None:
    try:
        await _end_parts(warm)
    except asyncio.CancelledError:  # the loop is shutting down: finish first (once more is the end)
        await _end_parts(warm)
        raise


async def _end_parts(warm: Warm) -> None:
    with contextlib.suppress(Exception):
        await end_kept(warm.spawned)
    with contextlib.suppress(Exception):
        await warm.creds.aclose()
