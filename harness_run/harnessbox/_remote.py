"""``HarnessBox(base_url=..., api_key=...)``: the sessions run on a ``harness-run serve`` team server.

The box's configuration (its :class:`~harness_run.AgentSpec`) goes to ``POST /v1/boxes``; the server
answers with the served engine that runs exactly that spec (or refuses: 403 when the key may not,
404 naming what it serves). From then on it is :func:`harness_run.connect`'s engine: turns, streams,
``run_command`` (``exec``), re-attach — over HTTP, with the secrets sent per turn, never stored.
"""

from __future__ import annotations

import asyncio
import os

from harness_run.errors import UsageError
from harness_run.runtime import Engine
from harness_run.runtime.server_client import Wire, connect
from harness_run.spec import AgentSpec

__all__ = ["ServerProvider"]


class ServerProvider:
    """The engine a team server picks for a HarnessBox configuration (see the module docstring)."""

    name = "server"
    enforces_network = True
    """The server runs the spec as given; ``network="none"`` only matches an engine that enforces it."""

    def __init__(self, base_url: str, api_key: str | None) -> None:
        key = api_key or os.environ.get("HARNESS_RUN_API_KEY")
        if not key:
            raise UsageError(
                f"base_url={base_url!r} needs the server's API key: api_key=... or HARNESS_RUN_API_KEY "
                "(the operator makes one with `harness-run serve keys create --name NAME --scope turn`)"
            )
        self.base_url = base_url
        self._key = key

    def __repr__(self) -> str:
        return f"<ServerProvider {self.base_url}>"

    async def deploy(self, spec: AgentSpec) -> Engine:
        def pick() -> Engine:
            answer = Wire(self.base_url, self._key).call("POST", "/v1/boxes", {"spec": spec.to_dict()})
            return connect(self.base_url, self._key, engine=str(answer["engine"]))

        return await asyncio.to_thread(pick)
