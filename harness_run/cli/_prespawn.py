"""Spawn first: a fresh ``harness-run run`` starts the harness from the workdir's launch-plan cache
before it imports asyncio or pydantic, and finishes its own start-up while the harness boots.

Standard library only, and only its light modules. On a hit (an entry for this spec file, these
flags and this library, see ``harness_run._launch``) :func:`prespawn` makes the new session's
directories, binds the model proxy's socket, fills in the session id, the prompt and fresh turn
tokens, writes the config files, spawns the harness (its prompt on its stdin) and the reaper that
ends it should this process die — with ``os.posix_spawn``, before the event loop exists. The command
then starts the loop, which takes the processes over (:meth:`Early.adopt`), validates the spec and
runs the turn as always; the local engine adopts the process or stops it
(``runtime/local/_spawn_first.py``). :meth:`Early.discard` ends whatever the engine did not take
over — a spec that fails validation leaves no process behind. On a miss the engine writes the entry
for the next run. ``HARNESS_RUN_SPAWN_FIRST=0`` turns it off.
"""

from __future__ import annotations

import _socket
import binascii
import os
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from harness_run import _launch
from harness_run._launch import (
    GUARD_SOCKET,
    GUARD_TOKEN,
    PROMPT,
    PROXY,
    SESSION,
    TURN_ENV,
    LaunchEntry,
    RawChild,
    Resolved,
)
from harness_run.vocab.version import __version__
from harness_run.vocab.workdir import default_workdir, resolve_workdir

if TYPE_CHECKING:
    import socket

    from harness_run.runtime import ChildProcess
    from harness_run.runtime.local import SpawnFirst

__all__ = ["OFF_ENV", "Early", "cache_flags", "prespawn"]

OFF_ENV = "HARNESS_RUN_SPAWN_FIRST"


class Early:
    """What :func:`prespawn` did for the session about to start: on a miss only its id and the cache
    entry's file; on a hit also the running harness, its reaper, the proxy socket and turn tokens.
    (A plain class: ``dataclasses`` costs ~10 ms of imports before the spawn.)"""

    def __init__(self, session_id: str, cache_file: Path) -> None:
        self.session_id = session_id
        self.cache_file = cache_file
        self.raw: RawChild | None = None
        """The harness as spawned (before the event loop): :meth:`adopt` makes it :attr:`process`."""
        self.raw_reaper: RawChild | None = None
        self.process: ChildProcess | None = None
        self.reaper: ChildProcess | None = None
        self.tag = ""
        self.since = 0
        """Clock ticks since boot (``/proc/<pid>/stat``'s unit) a second before the spawn."""
        self.raw_sock: _socket.socket | None = None
        """The model proxy's listening socket as bound before the event loop: :attr:`sock` once adopted."""
        self.sock: socket.socket | None = None
        self.tokens: tuple[str, ...] = ()
        self.guard: tuple[str, str] | None = None
        """The guard server's socket path (in a 0700 directory made here) and token, for the engine's."""
        self.plan: Resolved | None = None
        self.keep_stdin_open = False
        self.made: list[Path] = []
        """The directories made for it (the first holds the others)."""
        self.kept = False
        """The session was stored: its directories are the session's now."""
        self.link: SpawnFirst | None = None

    async def adopt(self) -> None:
        """Hand the processes spawned before the event loop to it (call first thing in the loop)."""
        from harness_run._launch import adopt

        raw, self.raw = self.raw, None
        raw_reaper, self.raw_reaper = self.raw_reaper, None
        if raw is not None:
            self.process = await adopt(raw)
        if raw_reaper is not None:
            self.reaper = await adopt(raw_reaper)
        raw_sock, self.raw_sock = self.raw_sock, None
        if raw_sock is not None:
            import socket

            self.sock = socket.socket(fileno=raw_sock.detach())

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
            spawned = Spawned(self.process, self.reaper, self.tag, plan, Path(self.plan.cwd), self.since)
        self.link = SpawnFirst(self.session_id, self.cache_file, spawned, self.sock, self.tokens, self.guard)
        return self.link

    async def discard(self) -> None:
        """End what the engine did not take over: the process and its reaper, the socket, and the
        session's directories unless the session was stored."""
        await self.adopt()  # (a no-op unless the loop never got to it)
        process, self.process = self.process, None
        reaper, self.reaper = self.reaper, None
        if process is not None and (self.link is None or not self.link.claimed):
            from harness_run.runtime import kill_tree, release_reaper  # the error path only

            await kill_tree(process, grace=0.5, tag=self.tag)
            await release_reaper(reaper)
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


def prespawn(spec: str, prompt: str, workdir: Path | None, flags: Sequence[str]) -> Early | None:
    """Spawn the harness from the cache entry for ``spec`` and ``flags`` (the options that change
    the launch plan) if there is one; None when spawn first is off or the inputs are not plain
    (the normal path reports what is wrong with them)."""
    early = _lookup(spec, workdir, flags)
    if early is None:
        return None
    entry = _launch.load(early.cache_file)
    if entry is None:
        return early
    try:
        if _prepare(early, entry, prompt):
            _spawn(early, entry)
            return early
    except OSError:  # the binary or a directory is gone: launch normally, which says so
        pass
    _undo(early)
    return Early(early.session_id, early.cache_file)


def _undo(early: Early) -> None:
    """A spawn that failed part way (before the event loop): what it made goes."""
    import shutil

    for child in (early.raw, early.raw_reaper):  # (the reaper, its stdin closed, ends the harness)
        if child is not None:
            for fd in (child.stdin, child.stdout, child.stderr):
                if fd is not None:
                    os.close(fd)
    early.raw = early.raw_reaper = None
    if early.raw_sock is not None:
        early.raw_sock.close()
    if early.made:
        shutil.rmtree(early.made[0], ignore_errors=True)
    if early.guard is not None:
        shutil.rmtree(os.path.dirname(early.guard[0]), ignore_errors=True)


def _lookup(spec: str, workdir: Path | None, flags: Sequence[str]) -> Early | None:
    if os.environ.get(OFF_ENV) == "0":
        return None
    try:
        root = resolve_workdir(workdir if workdir is not None else default_workdir())
        spec_file = Path(spec).resolve()
        data = spec_file.read_bytes()
    except Exception:  # a bad path or workdir: the normal path says what is wrong with it
        return None
    key = _launch.cache_key(spec_file, data, flags, version=__version__)
    return Early(_uuid4(), _launch.entry_path(root, key))


def _prepare(early: Early, entry: LaunchEntry, prompt: str) -> bool:
    """The plan for this run (session id, prompt, proxy socket, tokens), its directories and files."""
    values = {SESSION: early.session_id, PROMPT: entry.prompt_value(prompt)}
    if entry.proxy:
        early.raw_sock = sock = _socket.socket(_socket.AF_INET, _socket.SOCK_STREAM)
        sock.bind(("127.0.0.1", 0))
        sock.listen(128)
        values[PROXY] = f"http://127.0.0.1:{sock.getsockname()[1]}"
    early.tokens = tuple("hrp-" + _urlsafe(24) for _ in range(entry.tokens))
    values.update({_launch.token(i): t for i, t in enumerate(early.tokens)})
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


def _spawn(early: Early, entry: LaunchEntry) -> None:
    plan = early.plan
    assert plan is not None
    tag = os.urandom(16).hex()
    early.tag = f"{TURN_ENV}={tag}"
    if hasattr(time, "CLOCK_BOOTTIME") and hasattr(os, "sysconf"):
        ticks = os.sysconf("SC_CLK_TCK")
        early.since = int(time.clock_gettime(time.CLOCK_BOOTTIME) * ticks) - ticks
    early.raw = raw = _launch.spawn_raw(
        plan.argv,
        cwd=plan.cwd,
        env={**plan.env, TURN_ENV: tag},
        stdin=plan.stdin,
        keep_stdin_open=entry.keep_stdin_open,
    )
    early.raw_reaper = _reaper(raw.pid, early.tag)
    if entry.preload:  # while the spec is validated: what the turn imports later
        import threading

        for module in entry.preload:
            threading.Thread(target=_preload, args=(module,), daemon=True).start()


def _urlsafe(size: int) -> str:
    """``secrets.token_urlsafe(size)`` without importing ``secrets`` or ``base64``."""
    text = binascii.b2a_base64(os.urandom(size), newline=False).rstrip(b"=")
    return text.translate(bytes.maketrans(b"+/", b"-_")).decode()


def _uuid4() -> str:
    """``str(uuid.uuid4())`` without importing ``uuid`` (a few ms before the spawn)."""
    raw = bytearray(os.urandom(16))
    raw[6] = (raw[6] & 0x0F) | 0x40  # version 4
    raw[8] = (raw[8] & 0x3F) | 0x80  # RFC 4122 variant
    h = raw.hex()
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


def _preload(module: str) -> None:
    import contextlib
    import importlib

    with contextlib.suppress(Exception):  # the turn imports it again and reports what fails
        importlib.import_module(module)


def _reaper(pid: int, tag: str) -> RawChild | None:
    """The watchdog ``runtime/_process.start_reaper`` starts for a turn, started here already."""
    env = {k: v for k, v in os.environ.items() if k != TURN_ENV}
    argv = _launch.reaper_argv(pid, tag)
    if argv is None:
        return None
    try:
        return _launch.spawn_raw(argv, cwd=None, env=env, keep_stdin_open=True, output=False)
    except OSError:
        return None
