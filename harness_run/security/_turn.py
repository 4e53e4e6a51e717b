"""A turn's credentials kept out of the agent's reach: the model proxy and the git broker together."""

from __future__ import annotations

import logging
import math
import socket
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import Protocol

from harness_run import telemetry
from harness_run.events import AgentEvent, RunResult
from harness_run.harness import GUARD_TOKEN_ENV, GUARD_URL_ENV, mcp_proxy_env, mcp_secret_env
from harness_run.security._approvals import ApprovalSink, TurnClock
from harness_run.security._git_broker import GitBroker
from harness_run.security._guard_broker import GuardBroker
from harness_run.security._mcp_broker import McpBroker
from harness_run.security._proxy import ModelProxy, proxy_enabled
from harness_run.spec import AgentSpec, StdioMcpServer

__all__ = ["TurnCredentials"]


class TurnId(Protocol):
    """Which turn (a runtime's ``Run``)."""

    @property
    def session_id(self) -> str: ...

    @property
    def turn(self) -> int: ...


_log = logging.getLogger("harness_run.security")


class TurnCredentials:
    """Per turn: :meth:`apply` rewrites the harness's environment (model endpoint and key → the
    proxy and a turn token; repository tokens → the credential helper; stdio MCP servers with
    secrets → the launcher of :class:`McpBroker`; the guard hook → :class:`GuardBroker`),
    :meth:`start` serves them while the CLI starts,
    :meth:`aclose` ends them with the turn.

    The proxy meters the turn's model usage and cost from the wire and enforces ``budget`` (USD)
    there: :meth:`launch_spec` then takes the budget off the spec the CLI is launched with (one
    enforcement, the exact one), :meth:`on_budget` is how the proxy stops the turn, and
    :meth:`settle` puts the metered figures into the turn's result.
    ``agent_uid``: the harness runs as this other uid (the brokers' sockets are opened to it)."""

    def __init__(
        self,
        budget: float | None = None,
        model: str = "",
        *,
        agent_uid: int | None = None,
        proxy_socket: socket.socket | None = None,
    ) -> None:
        """``proxy_socket``: the proxy's listening socket, bound before the turn (spawn first)."""
        self.proxy = ModelProxy(budget, model, sock=proxy_socket) if proxy_enabled() else None
        if self.proxy is None and proxy_socket is not None:
            proxy_socket.close()
        self.git = GitBroker(agent_uid)
        self.mcp = McpBroker(agent_uid)
        self.guard = GuardBroker(agent_uid)

    def apply(self, spec: AgentSpec, secrets: Mapping[str, str], env: dict[str, str]) -> dict[str, str]:
        if self.proxy is not None:
            env = self.proxy.substitute(spec.harness, env)
            env = self._route_mcp(spec, env)
        env = self.git.substitute(spec.repos, secrets, env)
        env = self.guard.substitute(spec.security_policy, env, spec.approvals)  # the hook asks this process
        if spec.harness == "claude-code" and GUARD_TOKEN_ENV in env and self.metering:
            # an HTTP hook on the proxy's port (served anyway): no process per tool call
            assert self.proxy is not None
            env[GUARD_URL_ENV] = self.proxy.guard_route(self.guard.http_verdict, env[GUARD_TOKEN_ENV])
        return self.mcp.substitute(spec, secrets, env)  # stdio MCP servers' secrets: started by the engine

    def _route_mcp(self, spec: AgentSpec, env: dict[str, str]) -> dict[str, str]:
        """Remote MCP servers' secret headers → the proxy: the harness gets the proxy's URL (with a
        per-turn token in its path) instead of the ``HARNESS_RUN_MCP_<SERVER>_<KEY>`` variables."""
        assert self.proxy is not None
        out = dict(env)
        for server in spec.mcp_servers:
            if isinstance(server, StdioMcpServer) or not server.header_secrets:
                continue
            names = {key: mcp_secret_env(server.name, key) for key in server.header_secrets}
            headers = {key: out.pop(var) for key, var in names.items() if var in out}
            out[mcp_proxy_env(server.name)] = self.proxy.mcp_route(server.url, headers)
        return out

    @property
    def metering(self) -> bool:
        """True when the turn's model requests go through the proxy (after :meth:`apply`)."""
        return self.proxy is not None and self.proxy.metering

    def launch_spec(self, spec: AgentSpec) -> AgentSpec:
        """The spec the CLI runs with: without ``max_budget_usd`` when the proxy enforces it."""
        if self.metering and spec.max_budget_usd is not None:
            return spec.model_copy(update={"max_budget_usd": None})
        return spec

    def on_budget(self, stop: Callable[[str], Awaitable[None]]) -> None:
        """``stop(reason)`` ends the turn when the proxy refuses a request for the budget."""
        if self.proxy is not None:
            self.proxy.on_budget = stop

    def ask_people(
        self,
        store: object,
        run: TurnId,
        emit: Callable[[AgentEvent], None],
        workspace: Path | None = None,
        clock: TurnClock | None = None,
        flush: Callable[[], None] | None = None,
    ) -> None:
        """Where this turn's approval requests go (``spec.approvals``, see :class:`ApprovalSink`):
        without it every call that would wait for a person is denied. Call it before :meth:`start`."""
        self.guard.desk.attach(ApprovalSink(store, run.session_id, run.turn, emit, workspace, clock, flush))

    def end_waits(self) -> None:
        """The turn's CLI has ended: calls still waiting for a person are denied now (their
        decisions emitted before the turn's result)."""
        self.guard.desk.end_waits()

    def on_failure(self, stop: Callable[[str], Awaitable[None]]) -> None:
        """``stop(reason)`` ends the turn (as an error) when the proxy cannot start serving."""
        if self.proxy is not None:
            self.proxy.on_failure = stop

    def settle(self, result: RunResult) -> RunResult:
        """``result`` with the usage and cost the proxy metered, when it metered any: the wire is
        what the endpoint bills. A harness figure that differs is logged and replaced. Calls still
        waiting for a person (the CLI has ended) are denied first, their decisions in the turn."""
        self.end_waits()
        meter = self.proxy.meter if self.proxy is not None else None
        if meter is None or not meter.responses:
            return result
        cost = meter.cost_usd if meter.cost_usd is not None else result.cost_usd
        if (
            cost is not None
            and result.cost_usd is not None
            and math.isclose(cost, result.cost_usd, rel_tol=1e-9)
        ):
            cost = result.cost_usd  # the same figure (the harness's float rounding aside)
        if result.usage != meter.usage or (result.cost_usd is not None and cost != result.cost_usd):
            _log.info(
                "%s reported usage %s and cost %s; the model proxy metered %s and %s (%d responses): "
                "the result has the proxy's figures",
                result.harness or "the harness",
                dict(result.usage),
                result.cost_usd,
                dict(meter.usage),
                cost,
                meter.responses,
            )
        return result.model_copy(update={"usage": meter.usage, "cost_usd": cost})

    def begin_turn(self, budget: float | None, model: str) -> None:
        """These credentials, kept with a harness process from an earlier turn, serve a new one:
        call :meth:`apply` next (it binds the turn's keys under the same tokens and sockets)."""
        if self.proxy is not None:
            self.proxy.begin_turn(budget, model)

    def end_turn(self) -> None:
        """The turn is over and its harness process is kept: no key or token stays bound (the
        process's requests are refused until :meth:`begin_turn` and :meth:`apply`); the servers keep
        their addresses. Calls still waiting for a person are denied."""
        self.end_waits()
        if self.proxy is not None:
            self.proxy.end_turn()
        self.git.forget()

    @property
    def keepable(self) -> bool:
        """Whether a process using these may be kept between turns: no stdio MCP server was started
        for it (those hold their secrets for the process's life)."""
        return not self.mcp.active

    async def start(self) -> None:
        """Serve the git broker now (its socket is made here) and the proxy in the background."""
        await self.git.start()
        await self.mcp.start()
        await self.guard.start()
        if self.proxy is not None:
            self.proxy.start_soon()

    def trace_under(self, parent: telemetry.Span) -> None:
        """Model requests through the proxy get spans under ``parent`` (the harness's span)."""
        if self.proxy is not None:
            self.proxy.parent = parent

    async def aclose(self) -> None:
        if self.proxy is not None:
            await self.proxy.aclose()
        await self.git.aclose()
        await self.mcp.aclose()
        await self.guard.aclose()
