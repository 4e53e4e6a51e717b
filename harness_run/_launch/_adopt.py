"""A child process started without asyncio (``_spawn.spawn_raw``: a fresh ``harness-run run`` spawns
the harness before it imports asyncio), handed to the event loop. (Imports asyncio: the package
loads it on first use.)

:func:`adopt` wraps its pipes in asyncio streams and watches its exit through a pidfd (a thread
waiting on it where there is none), so a turn handles it exactly as a process from
``asyncio.create_subprocess_exec``: the same ``pid``, ``returncode``, ``stdin``/``stdout``/``stderr``
and ``wait()`` (:class:`~harness_run.runtime.ChildProcess`).
"""

from __future__ import annotations

import asyncio
import contextlib
import os

from harness_run._launch._spawn import READ_LIMIT, RawChild

__all__ = ["AdoptedProcess", "adopt"]


class AdoptedProcess:
    """A :class:`~harness_run.runtime.ChildProcess` this process spawned before its event loop ran."""

    def __init__(
        self,
        pid: int,
        stdin: asyncio.StreamWriter | None,
        stdout: asyncio.StreamReader | None,
        stderr: asyncio.StreamReader | None,
        exited: asyncio.Future[int],
    ) -> None:
        self.pid = pid
        self.stdin = stdin
        self.stdout = stdout
        self.stderr = stderr
        self._exited = exited

    @property
    def returncode(self) -> int | None:
        return self._exited.result() if self._exited.done() else None

    async def wait(self) -> int:
        return await asyncio.shield(self._exited)


async def adopt(child: RawChild, limit: int = READ_LIMIT) -> AdoptedProcess:
    """``child``'s pipes as asyncio streams (what it has not read of its stdin written first) and a
    future for its exit status (``-N`` for a signal, as asyncio reports it)."""
    loop = asyncio.get_running_loop()
    stdout = await _reader(loop, child.stdout, limit)
    stderr = await _reader(loop, child.stderr, limit)
    stdin = await _writer(loop, child.stdin)
    child.stdin = child.stdout = child.stderr = None  # the streams own the descriptors now
    exited: asyncio.Future[int] = loop.create_future()
    _watch(loop, child.pid, exited)
    if stdin is not None and child.pending:
        stdin.write(child.pending)
        child.pending = b""
        with contextlib.suppress(ConnectionError):
            await stdin.drain()
        if child.close_stdin:
            stdin.close()
    return AdoptedProcess(child.pid, stdin, stdout, stderr, exited)


async def _reader(loop: asyncio.AbstractEventLoop, fd: int | None, limit: int) -> asyncio.StreamReader | None:
    if fd is None:
        return None
    reader = asyncio.StreamReader(limit=limit, loop=loop)
    pipe = os.fdopen(fd, "rb", 0)  # (the transport closes it)
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader, loop=loop), pipe)
    return reader


async def _writer(loop: asyncio.AbstractEventLoop, fd: int | None) -> asyncio.StreamWriter | None:
    if fd is None:  # closed at the spawn: a writer that is closed already (as the CLI's stdin is)
        fd = os.open(os.devnull, os.O_WRONLY)
        closed = True
    else:
        closed = False
    protocol = asyncio.StreamReaderProtocol(asyncio.StreamReader(loop=loop), loop=loop)
    transport, _ = await loop.connect_write_pipe(lambda: protocol, os.fdopen(fd, "wb", 0))
    writer = asyncio.StreamWriter(transport, protocol, None, loop)
    if closed:
        writer.close()
    return writer


def _watch(loop: asyncio.AbstractEventLoop, pid: int, exited: asyncio.Future[int]) -> None:
    """Resolve ``exited`` with ``pid``'s exit status once it exits (reaping it)."""

    def settle(status: int) -> None:
        if not exited.done():
            exited.set_result(os.waitstatus_to_exitcode(status))

    try:
        pidfd = os.pidfd_open(pid)
    except (AttributeError, OSError):  # no pidfd (an old kernel): a thread waits for it
        waiting = loop.run_in_executor(None, _wait, pid, 0)
        waiting.add_done_callback(lambda done: settle(done.result()[1]))
        return

    def readable() -> None:
        done, status = _wait(pid, os.WNOHANG)
        if done:
            loop.remove_reader(pidfd)
            os.close(pidfd)
            settle(status)

    loop.add_reader(pidfd, readable)


def _wait(pid: int, flags: int) -> tuple[int, int]:
    try:
        return os.waitpid(pid, flags)
    except ChildProcessError:  # reaped elsewhere: its status is lost
        return pid, 255 << 8
