"""Run one harness CLI process for one turn: stream its lines, steer it, stop it, leave nothing behind.

The process gets its own process group; on any exit path (success, error, timeout, interrupt,
cancellation, a limit the parser watches: ``max_turns``/``max_budget``) the group and every
descendant we can find are terminated, then killed. If this (client) process dies first — even by
SIGKILL — a small reaper process (``_reaper.py``, watching a pipe only this process writes to)
does the same, so no harness or tool process of the turn outlives its owner.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time
import uuid
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Protocol

from harness_run._launch import READ_LIMIT, TURN_ENV, spawn_reaper
from harness_run.errors import HarnessNotFoundError
from harness_run.events import AgentEvent, ResourceUsage, RunResult, StopReason
from harness_run.harness import LaunchPlan, LineParser
from harness_run.runtime._agent_user import AgentUser

__all__ = [
    "ChildProcess",
    "Spawned",
    "TurnProcess",
    "descendants",
    "end_kept",
    "end_kept_now",
    "kept_alive",
    "kill_tree",
    "memory_kb",
    "new_tag",
    "release_reaper",
    "resumed",
    "spawn_harness",
]

_STDERR_LINES = 40
_HAS_PROC = os.path.isdir("/proc/self")
_CLOCK_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


class ChildProcess(Protocol):
    """What a turn uses of its harness process: one from ``asyncio.create_subprocess_exec``, or one
    spawned before the event loop and adopted by it (``runtime/_adopt.py``)."""

    stdin: asyncio.StreamWriter | None
    stdout: asyncio.StreamReader | None
    stderr: asyncio.StreamReader | None

    @property
    def pid(self) -> int: ...

    @property
    def returncode(self) -> int | None: ...

    async def wait(self) -> int: ...


@dataclass(frozen=True, slots=True)
class Spawned:
    """A harness process started before its turn's :class:`TurnProcess` existed (``harness-run run``
    spawns first, see ``runtime/local/_spawn_first.py``), which the turn adopts instead of spawning.

    ``plan`` is what it was started with: its config files written, ``plan.stdin`` already on its
    stdin (closed unless ``plan.keep_stdin_open``), ``plan.env`` without the turn tag."""

    process: ChildProcess
    reaper: ChildProcess | None
    tag: str
    """``HARNESS_RUN_TURN=<hex>``: in the environment of the process and its descendants."""
    plan: LaunchPlan
    cwd: Path
    since: int = 0
    """:func:`boot_ticks` (or earlier) before it was spawned: its turn's processes start later."""


def boot_ticks() -> int:
    """Now, in the clock ticks since boot that ``/proc/<pid>/stat`` gives a process's start in."""
    return int(time.clock_gettime(time.CLOCK_BOOTTIME) * _CLOCK_TICKS)


def descendants(pid: int, tag: str | None = None, since: int | None = None) -> list[int]:
    """Every live descendant of ``pid`` (Linux /proc scan; empty elsewhere). With ``tag`` (a
    ``NAME=value`` in the environment of the turn's processes), also every process carrying it:
    a tool command that was re-parented (its harness died first, or it daemonized) is still found.
    ``since`` (:func:`boot_ticks` before the turn's process was spawned): only processes started
    after it can carry the tag, so only their environments are read (the scan's main cost)."""
    children: dict[int, list[int]] = {}
    tagged: list[int] = []
    marker = f"\0{tag}\0".encode() if tag else None
    try:
        entries = os.listdir("/proc")
    except OSError:
        return []
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as handle:
                stat = handle.read().decode(errors="replace")
            fields = stat.rsplit(")", 1)[1].split()
            ppid, started = int(fields[1]), int(fields[19])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(ppid, []).append(int(entry))
        if marker is not None and int(entry) != pid and (since is None or started >= since):
            with contextlib.suppress(OSError), open(f"/proc/{entry}/environ", "rb") as handle:
                if marker in b"\0" + handle.read():
                    tagged.append(int(entry))
    found: list[int] = []
    todo = [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found + [t for t in tagged if t not in found]


def _signal_all_but(pid: int, pids: list[int], sig: signal.Signals) -> None:
    """Signal ``pids`` (never ``pid`` itself, nor its group as a whole)."""
    for child in pids:
        if child != pid:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(child, sig)


def _signal_all(pid: int, pids: list[int], sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, sig)
    for child in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(child, sig)


async def start_reaper(
    pid: int, tag: str, user: AgentUser | None = None
) -> asyncio.subprocess.Process | None:
    """The watchdog that ends the turn's processes (group ``pid``, processes carrying ``tag``) if
    this process dies before :func:`release_reaper`; None where it cannot run (no ``/proc``). With
    ``user`` it runs as the agent: it reads their environments (the tag) and signals them."""
    # as the agent, nothing of this process's environment: the agent can read the reaper's
    env = {} if user is not None else {k: v for k, v in os.environ.items() if k != TURN_ENV}
    try:
        return await spawn_reaper(pid, tag, env, **(user.spawn_kwargs() if user is not None else {}))
    except OSError:
        return None


async def release_reaper(reaper: ChildProcess | None, *, sweep: bool = False) -> None:
    """Tell the reaper the turn was cleaned up here: it exits at once, without killing anything.
    ``sweep``: it ends what is left of the turn first (processes of another uid, whose environments
    this process cannot read)."""
    if reaper is None or reaper.stdin is None:
        return
    if not reaper.stdin.is_closing():
        with contextlib.suppress(ConnectionError, OSError):
            reaper.stdin.write(b"" if sweep else b"done")
            await reaper.stdin.drain()
        reaper.stdin.close()
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(reaper.wait(), 2.0)


async def kill_tree(proc: ChildProcess, grace: float = 2.0, tag: str | None = None) -> None:
    """SIGTERM the process group and descendants (and processes carrying ``tag``, see
    :func:`descendants`), wait ``grace`` s, then SIGKILL what is left."""
    pids = descendants(proc.pid, tag)
    _signal_all(proc.pid, pids, signal.SIGTERM)
    if proc.returncode is None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(proc.wait(), grace)
    pids = [p for p in dict.fromkeys([*pids, *descendants(proc.pid, tag)]) if _alive(p)]
    _signal_all(proc.pid, pids, signal.SIGKILL)
    if proc.returncode is None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(proc.wait(), grace)
    # SIGKILL is asynchronous: wait (briefly) until the descendants are really gone, so that no
    # tool process of the turn is still visible once its result is out
    deadline = time.monotonic() + grace
    for _ in range(int(grace / 0.01)):
        if time.monotonic() > deadline or not any(_alive(p) for p in pids):
            break
        await asyncio.sleep(0.01)


def sample_resources(pid: int) -> ResourceUsage | None:
    """CPU (self + waited-for children + live descendants) and peak RSS of a live process."""

    def cpu_of(target: int, with_children: bool) -> float:
        with open(f"/proc/{target}/stat", "rb") as handle:
            fields = handle.read().decode(errors="replace").rsplit(")", 1)[1].split()
        ticks = int(fields[11]) + int(fields[12])  # utime, stime
        if with_children:
            ticks += int(fields[13]) + int(fields[14])  # cutime, cstime
        return ticks / _CLOCK_TICKS

    try:
        cpu = cpu_of(pid, True)
        with open(f"/proc/{pid}/status", "rb") as handle:
            status = handle.read().decode(errors="replace")
    except (OSError, IndexError, ValueError):
        return None
    for child in _live_children(pid):
        with contextlib.suppress(OSError, IndexError, ValueError):
            cpu += cpu_of(child, False)
    peak_kb = next((int(line.split()[1]) for line in status.splitlines() if line.startswith("VmHWM:")), 0)
    return ResourceUsage(cpu_seconds=round(cpu, 3), peak_memory_mb=round(peak_kb / 1024, 1))


def _live_children(pid: int) -> list[int]:
    """The descendants of ``pid`` from each thread's ``/proc/<pid>/task/<tid>/children`` (a few reads;
    a sample taken as the turn ends, so a child re-parented meanwhile may be missed: for accounting
    only, never for a kill); the full scan where the kernel has no such file."""
    found: list[int] = []
    todo = [pid]
    try:
        while todo:
            parent = todo.pop()
            try:
                tasks = os.listdir(f"/proc/{parent}/task")
            except FileNotFoundError:
                continue  # gone meanwhile
            for task in tasks:
                try:
                    with open(f"/proc/{parent}/task/{task}/children", "rb") as handle:
                        kids = [int(k) for k in handle.read().split()]
                except FileNotFoundError:
                    if not os.path.exists(f"/proc/{parent}/task/{task}"):
                        continue  # the thread ended meanwhile
                    raise  # no `children` files in this kernel
                found += kids
                todo += kids
    except (FileNotFoundError, PermissionError):
        return descendants(pid)
    return list(dict.fromkeys(found))


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            return b") Z " not in handle.read()
    except OSError:
        return False


def _group(pid: int) -> int | None:
    """The process group of ``pid`` (None when gone)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            return int(handle.read().decode(errors="replace").rsplit(")", 1)[1].split()[2])
    except (OSError, IndexError, ValueError):
        return None


def new_tag() -> str:
    """A fresh ``HARNESS_RUN_TURN=<hex>`` for a harness process and its descendants."""
    return f"{TURN_ENV}={uuid.uuid4().hex}"


async def spawn_harness(
    plan: LaunchPlan,
    cwd: Path,
    tag: str,
    user: AgentUser | None = None,
    hand_over: tuple[Path, ...] = (),
    nice: int = 0,
) -> Spawned:
    """Start a harness process from ``plan`` (its config files written first; as ``user`` after
    ``hand_over``) in its own process group, with its reaper; ``plan.stdin`` is not written.
    ``nice``: its CPU priority is lowered by that much (its tools inherit it), e.g. so that a
    server's event loop keeps its share of the CPU while many agents start."""
    for path, text in plan.files.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        if text.startswith("#!"):
            path.chmod(0o755)  # a script the harness runs (OpenCode's guarded shell; no secret in it)
    if user is not None:
        await asyncio.to_thread(user.hand_over, *hand_over)
    since = boot_ticks() - _CLOCK_TICKS
    try:
        proc = await asyncio.create_subprocess_exec(
            *plan.argv,
            cwd=cwd,
            env={**plan.env, TURN_ENV: tag.split("=", 1)[1]},
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            start_new_session=True,
            limit=READ_LIMIT,
            **(user.spawn_kwargs() if user is not None else {}),
        )
    except FileNotFoundError as exc:
        raise HarnessNotFoundError(f"cannot start {plan.argv[0]!r}: {exc.strerror}") from None
    if nice > 0:
        with contextlib.suppress(OSError):
            os.setpriority(os.PRIO_PROCESS, proc.pid, min(19, os.getpriority(os.PRIO_PROCESS, 0) + nice))
    reaper = await start_reaper(proc.pid, tag, user)
    return Spawned(process=proc, reaper=reaper, tag=tag, plan=plan, cwd=cwd, since=since)


async def end_kept(spawned: Spawned, grace: float = 2.0) -> None:
    """End a harness process kept between turns: its stdin closed (the CLI exits by itself), then
    its group and the processes carrying its tag stopped; its reaper released."""
    proc = spawned.process
    if proc.stdin is not None and not proc.stdin.is_closing():
        proc.stdin.close()
    if proc.returncode is None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(proc.wait(), grace / 4)
    await kill_tree(proc, grace=grace / 4, tag=spawned.tag)
    await release_reaper(spawned.reaper)


def end_kept_now(spawned: Spawned) -> None:
    """:func:`end_kept` without waiting (``engine.close()``): SIGKILL the group and the processes
    carrying its tag; the reaper's pipe is closed (it exits), or, when the loop that owns the pipes
    is closed already, it sees its pipe close when this process exits."""
    pid = spawned.process.pid
    _signal_all(pid, descendants(pid, spawned.tag), signal.SIGKILL)
    for child in (spawned.process, spawned.reaper):
        transport = getattr(child, "_transport", None)  # asyncio's, of a loop that may be closed:
        loop = getattr(transport, "_loop", None)  # its pipes cannot be closed through that loop
        if not isinstance(loop, asyncio.AbstractEventLoop) or child is None:
            continue
        if loop.is_closed():
            setattr(transport, "_closed", True)  # noqa: B010 (the fds go with the pipe objects)
        elif child.stdin is not None and not child.stdin.is_closing():
            child.stdin.close()


def resumed(spawned: Spawned, plan: LaunchPlan) -> Spawned:
    """A kept process taking a new turn (``plan``, whose stdin was written to it): the turn's own
    processes are the ones started from now on."""
    return replace(spawned, plan=plan, since=boot_ticks() - _CLOCK_TICKS)


def kept_alive(spawned: Spawned) -> bool:
    """Whether a kept harness process is still there to take a turn (not exited, not a zombie)."""
    return spawned.process.returncode is None and _alive(spawned.process.pid)


def memory_kb(pid: int) -> int:
    """Resident memory of ``pid`` and its descendants, in KiB (0 when gone)."""
    total = 0
    for target in [pid, *_live_children(pid)]:
        with contextlib.suppress(OSError, ValueError, IndexError), open(f"/proc/{target}/status", "rb") as f:
            for line in f.read().decode(errors="replace").splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1])
    return total


class TurnProcess:
    """One turn's process. ``run()`` returns the result; ``steer()``/``stop()`` act on it meanwhile."""

    def __init__(
        self,
        plan: LaunchPlan,
        parser: LineParser,
        cwd: Path,
        emit: Callable[[AgentEvent], None],
        timeout: float,
        on_spawn: Callable[[], None] | None = None,
        user: AgentUser | None = None,
        hand_over: tuple[Path, ...] = (),
        spawned: Spawned | None = None,
        keep: bool = False,
        nice: int = 0,
    ) -> None:
        """``spawned``: the turn's process, already running (started with ``plan``): adopted.
        ``keep``: a CLI that reads its prompts from stdin stays up after its result line (stdin
        open, nothing killed but the tool processes the turn left outside the CLI's process
        group); :attr:`kept` is it then."""
        self._keep = keep
        self._nice = nice
        self._keeping = False
        self.kept: Spawned | None = None
        """After :meth:`run`: the live harness process, for the session's next turn (``keep``)."""
        self._plan = plan
        self._spawned = spawned
        self._user = user
        self._hand_over = hand_over
        """With ``user``: the trees the agent gets (workspace, home) before the CLI starts."""
        self._parser = parser
        self._cwd = cwd
        self._emit = emit
        self._timeout = timeout
        self._proc: ChildProcess | None = None
        self._stop_reason: StopReason | None = None
        self._stop_note: str | None = None
        self._stderr: deque[str] = deque(maxlen=_STDERR_LINES)
        self._on_spawn = on_spawn
        self._tag = spawned.tag if spawned is not None else new_tag()
        """In the environment of the CLI and (inherited) its tool commands: found again at kill time."""
        self.cancelled_result: RunResult | None = None
        self._resources: ResourceUsage | None = None
        self._since = spawned.since if spawned is not None else 0
        self._deadline: asyncio.Timeout | None = None
        self._left: float | None = None
        """Seconds the turn had left when its deadline was paused (a tool call waits for a person)."""
        """:func:`boot_ticks` a second before the CLI was spawned: the turn's processes start later."""

    async def run(self) -> RunResult:
        if self._spawned is not None:
            proc, reaper = self._spawned.process, self._spawned.reaper
            self._proc = proc
        else:
            proc, reaper = await self._spawn()
        if self._on_spawn is not None:
            self._on_spawn()  # e.g. one-time warm-up, hidden behind the CLI's own start-up
        try:
            async with asyncio.timeout(self._timeout) as self._deadline:
                await self._pump(proc)
        except TimeoutError:
            self._stop_reason = "timeout"
            self._resources = self._resources or sample_resources(proc.pid)
        except asyncio.CancelledError:
            self._stop_reason = self._stop_reason or "cancelled"
            self._resources = self._resources or sample_resources(proc.pid)
            await asyncio.shield(kill_tree(proc, tag=self._tag))
            self.cancelled_result = self._result(proc.returncode)  # what the turn did before the cancel
            raise
        finally:
            if self._keeping and proc.returncode is None and not self._stop_reason:
                # kept for the next turn: only what its tools left goes, never the CLI's own process
                # group (the CLI, and a server it drives: the Codex bridge's app-server); the CLIs
                # run tool commands in sessions of their own
                left = descendants(proc.pid, self._tag, self._since)
                left = [p for p in left if _alive(p) and _group(p) != proc.pid]
                _signal_all_but(proc.pid, left, signal.SIGKILL)
                self.kept = Spawned(
                    process=proc, reaper=reaper, tag=self._tag, plan=self._plan, cwd=self._cwd
                )
            elif proc.returncode is None or self._stop_reason:
                await asyncio.shield(kill_tree(proc, grace=0.5 if self._stop_reason else 2.0, tag=self._tag))
            else:  # exited (or was killed): still reap what it left, by group and by the turn's tag
                left = descendants(proc.pid, self._tag, self._since)
                _signal_all(proc.pid, [p for p in left if _alive(p)], signal.SIGKILL)
            if self.kept is None:
                await asyncio.shield(release_reaper(reaper, sweep=self._user is not None))
        return self._result(proc.returncode)

    async def _spawn(self) -> tuple[ChildProcess, ChildProcess | None]:
        spawned = await spawn_harness(
            self._plan, self._cwd, self._tag, self._user, self._hand_over, self._nice
        )
        self._proc, self._since = spawned.process, spawned.since
        return spawned.process, spawned.reaper

    def _result(self, exit_code: int | None) -> RunResult:
        result = self._parser.finish(exit_code, "".join(self._stderr))
        if self._resources is not None:
            result = result.model_copy(update={"resources": self._resources})
        if self._stop_reason is not None:
            note = {
                "timeout": f"the turn timed out after {self._timeout:g} s",
                "interrupted": "the turn was interrupted",
                "cancelled": "the turn was cancelled",
            }
            limit = self._stop_reason in ("timeout", "max_turns", "max_budget", "error")
            result = result.model_copy(
                update={
                    # a stopped CLI has no result line: that is no failure of its own unless it had
                    # finished; a limit is (as Claude Code reports its own max_turns/max_budget)
                    "stop_reason": self._stop_reason,
                    "is_error": limit or (result.is_error and self._parser.finished),
                    "error": self._stop_note or note.get(self._stop_reason, self._stop_reason),
                }
            )
        return result

    async def _pump(self, proc: ChildProcess) -> None:
        assert proc.stdin is not None
        assert proc.stdout is not None
        assert proc.stderr is not None
        stderr_task = asyncio.create_task(self._drain_stderr(proc.stderr))
        if self._spawned is not None:  # its stdin was written (and closed if need be) at its spawn
            with contextlib.suppress(ConnectionError):
                await proc.stdin.drain()
        else:
            if self._plan.stdin:
                proc.stdin.write(self._plan.stdin)
                with contextlib.suppress(ConnectionError):
                    await proc.stdin.drain()
            if not self._plan.keep_stdin_open:
                proc.stdin.close()
        while True:
            try:
                line = await proc.stdout.readline()
            except ValueError:  # a line longer than the limit: skip it, keep going
                continue
            if not line:
                break
            for event in self._parser.feed(line.decode("utf-8", errors="replace")):
                self._emit(event)
            request = self._parser.stop_request
            if request is not None and self._stop_reason is None:
                # a limit the CLI cannot enforce itself: stop it now, keep reading what it printed
                self._stop_reason, self._stop_note = request.reason, request.message
                self._resources = sample_resources(proc.pid)
                await kill_tree(proc, grace=0.5, tag=self._tag)
            if self._parser.finished and not proc.stdin.is_closing():
                self._resources = sample_resources(proc.pid)
                if self._keep and self._stop_reason is None:
                    self._keeping = True  # the turn is over; the CLI waits for the next prompt
                    break
                proc.stdin.close()  # the turn is over: let the CLI exit
        if self._keeping:
            stderr_task.cancel()  # the next turn's reader takes over the stream
            with contextlib.suppress(asyncio.CancelledError):
                await stderr_task
            return
        await proc.wait()
        await stderr_task

    async def _drain_stderr(self, stream: asyncio.StreamReader) -> None:
        while True:
            try:
                line = await stream.readline()
            except ValueError:
                continue
            if not line:
                return
            self._stderr.append(line.decode("utf-8", errors="replace"))

    def pause_deadline(self) -> None:
        """Stop the turn's ``timeout`` clock (a tool call waits for a person's decision)."""
        deadline = self._deadline
        when = deadline.when() if deadline is not None else None
        if deadline is not None and when is not None and self._left is None and not deadline.expired():
            self._left = when - asyncio.get_running_loop().time()
            deadline.reschedule(None)

    def resume_deadline(self) -> None:
        """Start it again with the time it had left when paused."""
        deadline, left = self._deadline, self._left
        if deadline is not None and left is not None:
            self._left = None
            deadline.reschedule(asyncio.get_running_loop().time() + max(left, 0.0))

    async def steer(self, payload: bytes) -> bool:
        proc = self._proc
        if proc is None or proc.stdin is None or proc.stdin.is_closing() or proc.returncode is not None:
            return False
        proc.stdin.write(payload)
        try:
            await proc.stdin.drain()
        except ConnectionError:
            return False
        return True

    async def kill(self) -> None:
        """SIGKILL the turn's process group, its descendants and every process carrying its tag at
        once, with no SIGTERM first (``engine.aclose(kill=True)``); the turn ends ``interrupted``."""
        self._stop_reason = "interrupted"
        proc = self._proc
        if proc is not None and proc.returncode is None:
            self._resources = self._resources or sample_resources(proc.pid)
            _signal_all(proc.pid, descendants(proc.pid, self._tag), signal.SIGKILL)

    async def stop(self, reason: StopReason = "interrupted", note: str | None = None) -> None:
        """Stop the turn's process group; the result gets ``reason`` (and ``note`` as its error)."""
        self._stop_reason, self._stop_note = reason, note or self._stop_note
        if self._proc is not None and self._proc.returncode is None:
            self._resources = self._resources or sample_resources(self._proc.pid)
            await kill_tree(self._proc, grace=0.5, tag=self._tag)
