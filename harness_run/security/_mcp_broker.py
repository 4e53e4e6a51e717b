"""Stdio MCP servers that need secrets, started by the engine (never by the harness).

One :class:`McpBroker` per turn: a unix socket (in a 0700 directory) served by the engine and a random
per-turn token. The harness's MCP config names the stdlib launcher (``_mcp_launcher.py SERVER``) in
place of each stdio server that has ``env_secrets``; the launcher connects here with the token and
the server's name, and the broker starts *the spec's* command for that name (never one the caller
chooses) with the server's secrets added to its environment, then relays bytes between the launcher
and the server's stdin/stdout. The secrets stay in the engine and that one process: not in the
harness's environment, its config files or its tools' environment. The servers are stopped when
their launcher goes (the harness closed them) and when the turn ends.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shlex
import signal
import sys
from collections.abc import Mapping
from pathlib import Path

from harness_run.harness import MCP_LAUNCHER_ENV, mcp_secret_env, mcp_secret_values
from harness_run.security._socket import SocketBroker
from harness_run.spec import AgentSpec, StdioMcpServer

__all__ = ["McpBroker"]

_LAUNCHER = Path(__file__).with_name("_mcp_launcher.py")


class McpBroker(SocketBroker):
    """Starts one turn's secret-bearing stdio MCP servers for their launchers (module docstring)."""

    def __init__(self, agent_uid: int | None = None) -> None:
        """``agent_uid``: the launchers run as this other uid (the socket is opened to it)."""
        super().__init__("hr-mcp-", "hrm-", agent_uid)
        self._servers: dict[str, tuple[StdioMcpServer, dict[str, str]]] = {}
        self._env: dict[str, str] = {}
        self._procs: set[asyncio.subprocess.Process] = set()
        self.started = 0
        self.refused = 0

    def substitute(self, spec: AgentSpec, secrets: Mapping[str, str], env: dict[str, str]) -> dict[str, str]:
        """``env`` with the launcher's settings instead of the stdio servers' secret variables
        (unchanged when no stdio server has ``env_secrets``)."""
        values = mcp_secret_values(spec, secrets)
        for server in spec.mcp_servers:
            if isinstance(server, StdioMcpServer) and server.env_secrets:
                rendered = {key: values[mcp_secret_env(server.name, key)] for key in server.env_secrets}
                self._servers[server.name] = (server, rendered)
        if not self._servers:
            return env
        out = dict(env)
        self._env = {k: v for k, v in out.items() if not k.startswith("HARNESS_RUN_MCP_")}
        out[MCP_LAUNCHER_ENV] = shlex.join([sys.executable, "-I", "-S", str(_LAUNCHER)])
        out["HARNESS_RUN_MCP_SOCKET"] = self.socket_path
        out["HARNESS_RUN_MCP_TOKEN"] = self.token
        return out

    @property
    def active(self) -> bool:
        """Whether a stdio MCP server is served to the turn's harness (its secrets are held here)."""
        return bool(self._servers)

    async def start(self) -> None:
        if self._servers and self._server is None:
            await self._listen(self._serve)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        proc: asyncio.subprocess.Process | None = None
        try:
            line = await asyncio.wait_for(reader.readline(), 10)
            request = json.loads(line or b"{}")
            given = str(request.get("token", "")) if isinstance(request, dict) else ""  # pyright: ignore[reportUnknownMemberType, reportUnknownArgumentType]
            name = str(request.get("server", "")) if isinstance(request, dict) else ""  # pyright: ignore[reportUnknownMemberType, reportUnknownArgumentType]
            entry = self._servers.get(name)
            if not self._accepts(given) or entry is None:
                self.refused += 1
                writer.write(b"refused: no such MCP server for this turn's token\n")
                await writer.drain()
                return
            server, rendered = entry
            proc = await asyncio.create_subprocess_exec(
                server.command,
                *server.args,
                env={**self._env, **server.env, **rendered},
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.DEVNULL,
                start_new_session=True,
            )
            self._procs.add(proc)
            self.started += 1
            writer.write(b"ok\n")
            await writer.drain()
            await _relay(reader, writer, proc)
        except (OSError, ValueError, TimeoutError):
            pass
        finally:
            if proc is not None:
                await _stop(proc)
                self._procs.discard(proc)
            writer.close()

    async def aclose(self) -> None:
        self._servers.clear()
        if self._server is not None:
            self._server.close()  # no new launcher; then the running servers, then the socket
        for proc in list(self._procs):
            await _stop(proc)
        await self._remove(5)


async def _relay(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, proc: asyncio.subprocess.Process
) -> None:
    assert proc.stdin is not None
    assert proc.stdout is not None
    stdin, stdout = proc.stdin, proc.stdout

    async def up() -> None:
        while data := await reader.read(65536):
            stdin.write(data)
            await stdin.drain()
        stdin.close()

    async def down() -> None:
        while data := await stdout.read(65536):
            writer.write(data)
            await writer.drain()

    tasks = [asyncio.ensure_future(up()), asyncio.ensure_future(down())]
    try:
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


async def _stop(proc: asyncio.subprocess.Process) -> None:
    if proc.returncode is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            await asyncio.wait_for(proc.wait(), 2)
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            await proc.wait()
