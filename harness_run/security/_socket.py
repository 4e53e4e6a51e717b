"""What the git broker and the MCP broker share: one turn's unix socket and its token."""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import os
import secrets
import shutil
import tempfile
from collections.abc import Awaitable, Callable
from pathlib import Path

__all__ = ["SocketBroker"]

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


class SocketBroker:
    """A per-turn unix socket in a private (0700) directory and a random token its clients present.
    When the agent runs as another uid (``agent_uid``), the directory becomes searchable and the
    socket the agent's, so only the agent and this process can connect."""

    def __init__(self, prefix: str, token_prefix: str, agent_uid: int | None) -> None:
        self._dir = tempfile.mkdtemp(prefix=prefix)  # 0700
        self._agent_uid = agent_uid
        self.socket_path = str(Path(self._dir) / "s")
        self.token = token_prefix + secrets.token_urlsafe(24)
        self._server: asyncio.Server | None = None

    def adopt(self, socket_path: str, token: str) -> None:
        """Serve at ``socket_path`` (in a 0700 directory of its own, made by whoever chose it — spawn
        first's pre-spawn) with ``token``, which a process started before this broker was told."""
        if self._server is not None:
            raise RuntimeError("adopt() before the broker listens")
        shutil.rmtree(self._dir, ignore_errors=True)
        self._dir = str(Path(socket_path).parent)
        self.socket_path = socket_path
        self.token = token

    async def _listen(self, handler: Handler) -> None:
        self._server = await asyncio.start_unix_server(handler, path=self.socket_path)
        if self._agent_uid is not None:
            os.chmod(self._dir, 0o711)
            os.chown(self.socket_path, self._agent_uid, -1)
            os.chmod(self.socket_path, 0o600)

    def _accepts(self, given: str) -> bool:
        return hmac.compare_digest(given.encode(), self.token.encode())

    async def _remove(self, timeout: float | None = None) -> None:
        """Stop listening (already-closed is fine), wait for the server, remove the directory."""
        if self._server is not None:
            self._server.close()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._server.wait_closed(), timeout)
        shutil.rmtree(self._dir, ignore_errors=True)
