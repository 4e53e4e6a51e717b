"""A turn's credentials kept out of the agent's reach: the model proxy and the git broker together."""

from __future__ import annotations

from collections.abc import Mapping

from harness_run.security._git_broker import GitBroker
from harness_run.security._proxy import ModelProxy, proxy_enabled
from harness_run.spec import AgentSpec

__all__ = ["TurnCredentials"]


class TurnCredentials:
    """Per turn: :meth:`apply` rewrites the harness's environment (model endpoint and key → the
    proxy and a turn token; repository tokens → the credential helper), :meth:`start_soon` serves
    both while the CLI starts, :meth:`aclose` ends them with the turn."""

    def __init__(self, agent_uid: int | None = None) -> None:
        """``agent_uid``: the harness runs as this other uid (the git socket is opened to it)."""
        self.proxy = ModelProxy() if proxy_enabled() else None
        self.git = GitBroker(agent_uid)

    def apply(self, spec: AgentSpec, secrets: Mapping[str, str], env: dict[str, str]) -> dict[str, str]:
        if self.proxy is not None:
            env = self.proxy.substitute(spec.harness, env)
        return self.git.substitute(spec.repos, secrets, env)

    async def start(self) -> None:
        """Serve the git broker now (its socket is made here) and the proxy in the background."""
        await self.git.start()
        if self.proxy is not None:
            self.proxy.start_soon()

    async def aclose(self) -> None:
        if self.proxy is not None:
            await self.proxy.aclose()
        await self.git.aclose()
