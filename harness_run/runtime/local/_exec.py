"""``session.exec()`` on this machine: one shell command in the workspace, bounded in time and output."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Mapping
from pathlib import Path

from harness_run.runtime._process import kill_tree
from harness_run.runtime._session import ExecResult

__all__ = ["TIMEOUT_EXIT_CODE", "run_command"]

TIMEOUT_EXIT_CODE = 124
"""What ``timeout(1)`` returns for a command it had to stop."""

_CHUNK = 64 * 1024


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
        text = self.data.decode(errors="replace")
        for value in secret_values:
            text = text.replace(value, "***")
        return text


async def run_command(
    command: str,
    *,
    cwd: Path,
    env: Mapping[str, str],
    timeout: float,
    max_output: int,
    secret_values: list[str],
) -> ExecResult:
    """Run ``bash -c command``; after ``timeout`` s its process group is killed and the exit code is
    124. Each stream keeps ``max_output`` bytes at most; secret values are blanked in both."""
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
    )
    assert proc.stdout is not None
    assert proc.stderr is not None
    out, err = _Capped(max_output), _Capped(max_output)
    readers = asyncio.gather(out.drain(proc.stdout), err.drain(proc.stderr), proc.wait())
    timed_out = False
    try:
        await asyncio.wait_for(asyncio.shield(readers), timeout)
    except TimeoutError:
        timed_out = True
    finally:
        if proc.returncode is None or timed_out:
            await asyncio.shield(kill_tree(proc, grace=0.5))
        if not readers.done():  # a killed command's pipes may still be held by a detached child
            with contextlib.suppress(TimeoutError, asyncio.CancelledError):
                await asyncio.wait_for(asyncio.shield(readers), 1.0)
            readers.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await readers
    code = proc.returncode if proc.returncode is not None else -1
    return ExecResult(
        exit_code=TIMEOUT_EXIT_CODE if timed_out else code,
        stdout=out.text(secret_values),
        stderr=err.text(secret_values),
        truncated=out.truncated or err.truncated,
    )
