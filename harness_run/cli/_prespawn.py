"""Spawn first: a fresh ``harness-run run`` starts the harness from the workdir's launch-plan cache
before it imports pydantic, and finishes its own start-up while the harness boots.

Standard library only. On a hit (an entry for this spec file, these flags and this library, see
``vocab/launch_cache.py``) :func:`prespawn` makes the new session's directories, binds the model
proxy's socket, fills in the session id, the prompt and fresh turn tokens, writes the config files,
spawns the harness (its prompt on its stdin) and the reaper that ends it should this process die.
The command then validates the spec and runs the turn as always; the local engine adopts the
process or stops it (``runtime/local/_spawn_first.py``). :meth:`Early.discard` ends whatever the
engine did not take over — a spec that fails validation leaves no process behind. On a miss the
engine writes the entry for the next run. ``HARNESS_RUN_SPAWN_FIRST=0`` turns it off.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import importlib
import os
import socket
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from harness_run.vocab import launch_cache
from harness_run.vocab.launch_cache import (
    GUARD_SOCKET,
    GUARD_TOKEN,
    PROMPT,
    PROXY,
    READ_LIMIT,
    SESSION,
    TURN_ENV,
    Resolved,
)
from harness_run.vocab.workdir import default_workdir, resolve_workdir

if TYPE_CHECKING:
    from harness_run.runtime.local import SpawnFirst

__all__ = ["OFF_ENV", "Early", "cache_flags", "prespawn"]

OFF_ENV = "HARNESS_RUN_SPAWN_FIRST"


@dataclass
class Early:
    """What :func:`prespawn` did for the session about to start: on a miss only its id and the cache
    entry's file; on a hit also the running harness, its reaper, the proxy socket and turn tokens."""

    session_id: str
    cache_file: Path
    process: asyncio.subprocess.Process | None = None
    reaper: asyncio.subprocess.Process | None = None
    tag: str = ""
    sock: socket.socket | None = None
    tokens: tuple[str, ...] = ()
    guard: tuple[str, str] | None = None
    """The guard server's socket path (in a 0700 directory made here) and token, for the engine's."""
    plan: Resolved | None = None
    keep_stdin_open: bool = False
    made: list[Path] = field(default_factory=list[Path])
    """The directories made for it (the first holds the others)."""
    kept: bool = False
    """The session was stored: its directories are the session's now."""
    link: SpawnFirst | None = None

    def spawn_first(self) -> SpawnFirst:
        """The engine's end of it (imports the runtime: call once the spec is valid)."""
        from harness_run.harness import LaunchPlan
        from harness_run.runtime import Spawned
        from harness_run.runtime.local import SpawnFirst

        spawned = None
        if self.process is not None and self.plan is not None:
            plan = LaunchPlan(
                argv=self.plan.argv,
                env=self.plan.env,
                stdin=self.plan.stdin,
                keep_stdin_open=self.keep_stdin_open,
                files={Path(p): t for p, t in self.plan.files.items()},
            )
            spawned = Spawned(self.process, self.reaper, self.tag, plan, Path(self.plan.cwd))
        self.link = SpawnFirst(self.session_id, self.cache_file, spawned, self.sock, self.tokens, self.guard)
        return self.link

    async def discard(self) -> None:
        """End what the engine did not take over: the process and its reaper, the socket, and the
        session's directories unless the session was stored."""
        process, self.process = self.process, None
        reaper, self.reaper = self.reaper, None
        if process is not None and (self.link is None or not self.link.claimed):
            from harness_run.runtime import kill_tree  # the error path only

            await kill_tree(process, grace=0.5, tag=self.tag)
            if reaper is not None and reaper.stdin is not None:
                with contextlib.suppress(ConnectionError, OSError):
                    reaper.stdin.write(b"done")
                    await reaper.stdin.drain()
                reaper.stdin.close()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(reaper.wait(), 2.0)
        if self.sock is not None:  # (the turn's proxy, if it took it over, has closed it already)
            self.sock.close()
        if (self.made and not self.kept) or self.guard is not None:
            import shutil

            if self.made and not self.kept:
                shutil.rmtree(self.made[0], ignore_errors=True)
            if self.guard is not None:  # (the turn's guard server, if it took it over, removed it)
                shutil.rmtree(os.path.dirname(self.guard[0]), ignore_errors=True)


def cache_flags(model: str | None, secrets: Sequence[str]) -> list[str]:
    """The ``run`` options that change the launch plan, as part of the cache key."""
    return [f"model={model or ''}", f"secrets={','.join(sorted(set(secrets)))}"]


async def prespawn(spec: str, prompt: str, workdir: Path | None, flags: Sequence[str]) -> Early | None:
    """Spawn the harness from the cache entry for ``spec`` and ``flags`` (the options that change
    the launch plan) if there is one; None when spawn first is off or the inputs are not plain
    (the normal path reports what is wrong with them)."""
    early = _lookup(spec, workdir, flags)
    if early is None:
        return None
    entry = launch_cache.load(early.cache_file)
    if entry is None:
        return early
    try:
        if _prepare(early, entry, prompt):
            await _spawn(early, entry)
            return early
    except OSError:  # the binary or a directory is gone: launch normally, which says so
        pass
    await early.discard()
    return Early(early.session_id, early.cache_file)


def _lookup(spec: str, workdir: Path | None, flags: Sequence[str]) -> Early | None:
    if os.environ.get(OFF_ENV) == "0":
        return None
    try:
        root = resolve_workdir(workdir if workdir is not None else default_workdir())
        spec_file = Path(spec).resolve()
        data = spec_file.read_bytes()
    except Exception:  # a bad path or workdir: the normal path says what is wrong with it
        return None
    key = launch_cache.cache_key(spec_file, data, flags)
    return Early(_uuid4(), launch_cache.entry_path(root, key))


def _prepare(early: Early, entry: launch_cache.LaunchEntry, prompt: str) -> bool:
    """The plan for this run (session id, prompt, proxy socket, tokens), its directories and files."""
    values = {SESSION: early.session_id, PROMPT: entry.prompt_value(prompt)}
    if entry.proxy:
        early.sock = sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.bind(("127.0.0.1", 0))
        sock.listen(128)
        values[PROXY] = f"http://127.0.0.1:{sock.getsockname()[1]}"
    early.tokens = tuple("hrp-" + _urlsafe(24) for _ in range(entry.tokens))
    values.update({launch_cache.token(i): t for i, t in enumerate(early.tokens)})
    if entry.guard:  # what the guard broker makes: a private directory for its socket, a token
        folder = os.path.join(os.environ.get("TMPDIR") or "/tmp", f"hr-guard-{os.urandom(6).hex()}")
        os.mkdir(folder, 0o700)
        early.guard = (os.path.join(folder, "s"), "hrk-" + _urlsafe(24))
        values[GUARD_SOCKET], values[GUARD_TOKEN] = early.guard
    early.plan = plan = entry.resolve(values, os.environ)
    if plan is None:
        return False
    early.keep_stdin_open = entry.keep_stdin_open
    for name in plan.dirs:
        path = Path(name)
        if not path.is_dir():
            early.made.append(path)
        path.mkdir(mode=0o700, parents=True, exist_ok=True)
    for name, text in plan.files.items():
        path = Path(name)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        if text.startswith("#!"):
            path.chmod(0o755)
    return True


async def _spawn(early: Early, entry: launch_cache.LaunchEntry) -> None:
    plan = early.plan
    assert plan is not None
    tag = os.urandom(16).hex()
    early.tag = f"{TURN_ENV}={tag}"
    early.process = process = await asyncio.create_subprocess_exec(
        *plan.argv,
        cwd=plan.cwd,
        env={**plan.env, TURN_ENV: tag},
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        start_new_session=True,
        limit=READ_LIMIT,
    )
    assert process.stdin is not None
    if plan.stdin:
        process.stdin.write(plan.stdin)
    if not entry.keep_stdin_open:
        process.stdin.close()
    early.reaper = await _reaper(process.pid, early.tag)
    for module in entry.preload:  # while the spec is validated: what the turn imports later
        threading.Thread(target=_preload, args=(module,), daemon=True).start()


def _urlsafe(size: int) -> str:
    """``secrets.token_urlsafe(size)`` without importing ``secrets``."""
    return base64.urlsafe_b64encode(os.urandom(size)).rstrip(b"=").decode()


def _uuid4() -> str:
    """``str(uuid.uuid4())`` without importing ``uuid`` (a few ms before the spawn)."""
    raw = bytearray(os.urandom(16))
    raw[6] = (raw[6] & 0x0F) | 0x40  # version 4
    raw[8] = (raw[8] & 0x3F) | 0x80  # RFC 4122 variant
    h = raw.hex()
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


def _preload(module: str) -> None:
    with contextlib.suppress(Exception):  # the turn imports it again and reports what fails
        importlib.import_module(module)


async def _reaper(pid: int, tag: str) -> asyncio.subprocess.Process | None:
    """The watchdog ``runtime/_process.start_reaper`` starts for a turn, started here already."""
    try:
        return await launch_cache.spawn_reaper(
            pid, tag, {k: v for k, v in os.environ.items() if k != TURN_ENV}
        )
    except OSError:
        return None
