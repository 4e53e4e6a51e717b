"""``session.exec()`` on this machine: one shell command in the workspace, bounded in time and output."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Mapping
from pathlib import Path
from typing import cast

from harness_run.runtime._agent_user import AgentUser
from harness_run.runtime._process import kill_tree
from harness_run.runtime._session import ExecResult
from harness_run.security import redact_text

__all__ = ["TIMEOUT_EXIT_CODE", "run_command"]

TIMEOUT_EXIT_CODE = 124
"""What ``timeout(1)`` returns for a command it had to stop."""

_CHUNK = 64 * 1024
_DRAIN_GRACE = 0.3
"""Seconds to keep reading after the shell exited (output still in the pipes)."""


async def _exited(proc: asyncio.subprocess.Process) -> None:
    """Until the shell exits (``proc.wait()`` would also wait for every pipe to close)."""
    while proc.returncode is None:  # noqa: ASYNC110 - asyncio has no exit-only event
        await asyncio.sleep(0.02)


def _close_pipes(proc: asyncio.subprocess.Process) -> None:
    """Close our ends of the pipes a background child still holds (asyncio has no public call)."""
    transport = cast(asyncio.SubprocessTransport | None, getattr(proc, "_transport", None))
    if transport is not None:
        transport.close()


class _Capped:
    """The first ``limit`` bytes of a stream; the rest is read and dropped (the command never blocks)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.data = bytearray()
        self.truncated = False

    async def drain(self, stream: asyncio.StreamReader) -> None:
        while chunk := await stream.read(_CHUNK):
            room = self.limit - len(self.data)
            if len(chunk) > room:
                self.truncated = True
                chunk = chunk[: max(room, 0)]
            self.data += chunk

    def text(self, secret_values: list[str]) -> str:
        return redact_text(self.data.decode(errors="replace"), secret_values)


async def run_command(
    command: str,
    *,
    cwd: Path,
    env: Mapping[str, str],
    timeout: float,
    max_output: int,
    secret_values: list[str],
    user: AgentUser | None = None,
) -> ExecResult:
    """Run ``bash -c command`` (as ``user`` when given); after ``timeout`` s its process group is
    killed and the exit code is 124. Each stream keeps ``max_output`` bytes at most; secret values
    are blanked in both."""
    proc = await asyncio.create_subprocess_exec(
        "bash",
        "-c",
        command,
        cwd=cwd,
        env=dict(env),
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        start_new_session=True,
        **(user.spawn_kwargs() if user is not None else {}),
    )
    assert proc.stdout is not None
    assert proc.stderr is not None
    out, err = _Capped(max_output), _Capped(max_output)
    readers = asyncio.gather(out.drain(proc.stdout), err.drain(proc.stderr))
    timed_out = False
    try:  # the command is done when its shell exits: a background child may keep the pipes open
        await asyncio.wait_for(_exited(proc), timeout)
    except TimeoutError:
        timed_out = True
    finally:
        if proc.returncode is None or timed_out:
            await asyncio.shield(kill_tree(proc, grace=0.5))
        if not readers.done():  # output already written is read; a detached child's pipe is let go
            with contextlib.suppress(TimeoutError, asyncio.CancelledError):
                await asyncio.wait_for(asyncio.shield(readers), _DRAIN_GRACE)
            readers.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await readers
            _close_pipes(proc)
    code = proc.returncode if proc.returncode is not None else -1
    return ExecResult(
        exit_code=TIMEOUT_EXIT_CODE if timed_out else code,
        stdout=out.text(secret_values),
        stderr=err.text(secret_values),
        truncated=out.truncated or err.truncated,
    )
