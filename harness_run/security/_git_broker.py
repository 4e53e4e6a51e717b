"""Repository tokens for the agent's own git, asked for per request (never in its environment).

One :class:`GitBroker` per turn: a unix socket (in a 0700 directory) served by the engine, a random
per-turn token, and the session's repositories with their tokens in memory. The agent's environment
gets ``GIT_CONFIG_*`` entries naming ``_git_helper.py`` as the credential helper of each repository
URL, the socket's path and the turn token — no repository token: git asks the broker when the server
asks for credentials, and the broker answers only for those URLs, only during the turn.
"""

from __future__ import annotations

import asyncio
import json
import shlex
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path
from urllib.parse import urlsplit

from harness_run.security._socket import SocketBroker
from harness_run.spec import GitRepo

__all__ = ["GitBroker"]

_HELPER = Path(__file__).with_name("_git_helper.py")


class GitBroker(SocketBroker):
    """Answers the credential helper of one turn (see the module docstring)."""

    def __init__(self, agent_uid: int | None = None) -> None:
        """``agent_uid``: the agent runs as this other uid (the socket is opened to it)."""
        super().__init__("hr-git-", "hrg-", agent_uid)
        self._repos: dict[tuple[str, str, str], str] = {}
        """(scheme, host, path without .git) -> token."""
        self.answered = 0
        self.refused = 0

    @staticmethod
    def _key(scheme: str, host: str, path: str) -> tuple[str, str, str]:
        return scheme, host.lower(), path.strip("/").removesuffix(".git")

    def substitute(
        self, repos: Iterable[GitRepo], secrets: Mapping[str, str], env: dict[str, str]
    ) -> dict[str, str]:
        """``env`` with the repositories' tokens replaced by the credential helper (unchanged when no
        repository has a token)."""
        urls: list[str] = []
        for repo in repos:
            token = secrets.get(repo.auth) if repo.auth else None
            if token and repo.url.startswith(("http://", "https://")):
                parts = urlsplit(repo.url)
                self._repos[self._key(parts.scheme, parts.netloc, parts.path)] = token
                urls.append(repo.url)
        if not urls:
            return env
        out = {k: v for k, v in env.items() if not k.startswith("GIT_CONFIG_")}
        helper = "!" + shlex.join([sys.executable, "-I", "-S", str(_HELPER)])
        entries: list[tuple[str, str]] = []
        for url in urls:
            entries += [(f"credential.{url}.helper", helper), (f"credential.{url}.useHttpPath", "true")]
        out["GIT_CONFIG_COUNT"] = str(len(entries))
        for index, (key, value) in enumerate(entries):
            out[f"GIT_CONFIG_KEY_{index}"] = key
            out[f"GIT_CONFIG_VALUE_{index}"] = value
        out["GIT_TERMINAL_PROMPT"] = "0"
        out["HARNESS_RUN_GIT_SOCKET"] = self.socket_path
        out["HARNESS_RUN_GIT_TOKEN"] = self.token
        return out

    def forget(self) -> None:
        """Drop every token (the socket stays: a helper that asks gets nothing until the next
        :meth:`substitute`)."""
        self._repos.clear()

    async def start(self) -> None:
        if self._repos and self._server is None:
            await self._listen(self._serve)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        answer: dict[str, str] = {}
        try:
            line = await asyncio.wait_for(reader.readline(), 10)
            request = json.loads(line or b"{}")
            if isinstance(request, dict):
                answer = self._answer({str(k): str(v) for k, v in request.items()})  # pyright: ignore[reportUnknownVariableType, reportUnknownArgumentType]
            writer.write(json.dumps(answer).encode() + b"\n")
            await writer.drain()
        except (OSError, ValueError, TimeoutError):
            pass
        finally:
            writer.close()

    def _answer(self, request: dict[str, str]) -> dict[str, str]:
        if not self._accepts(request.get("token", "")):
            self.refused += 1
            return {}
        key = self._key(request.get("protocol", ""), request.get("host", ""), request.get("path", ""))
        token = self._repos.get(key)
        if token is None:
            self.refused += 1
            return {}
        self.answered += 1
        return {"username": "x-access-token", "password": token}

    async def aclose(self) -> None:
        self._repos.clear()
        await self._remove()
