"""The local engine's warm harness processes (mixed into
:class:`~harness_run.runtime.local.LocalEngine`; the bookkeeping is ``_warm.WarmProcesses``): the pool
filled ahead of sessions and claimed by ``start_session``, the check that a turn's process may be
kept, adopting a kept process for a turn, and parking it after the turn."""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from harness_run.errors import HarnessRunError, UsageError
from harness_run.events import AgentEvent
from harness_run.harness import HarnessDriver, LaunchPlan, TurnContext, get_driver
from harness_run.runtime._agent_user import AgentUser
from harness_run.runtime._process import Spawned, end_kept, new_tag, resumed, spawn_harness
from harness_run.runtime._run import Run
from harness_run.runtime._session import TurnOutcome, TurnPlan
from harness_run.runtime.local._spawn_first import SpawnFirst
from harness_run.runtime.local._warm import (
    Warm,
    WarmProcess,
    WarmProcesses,
    end_warm,
    fingerprint,
    holds_secret,
)
from harness_run.runtime.local._workspace import SessionPaths, Workspaces
from harness_run.security import TurnCredentials, resolve_secrets, secret_forms, secret_values
from harness_run.spec import AgentSpec
from harness_run.store import SessionRecord

__all__ = ["Held", "WarmHarnesses"]

_log = logging.getLogger("harness_run.runtime")

POOL_KEY_VARIABLE = {"claude-code": "ANTHROPIC_API_KEY", "codex": "OPENAI_API_KEY"}
"""The key a pooled process is started for when the environment has none: a turn that passes it
per run (``secrets=``) gets the pooled process (the proxy token is the same for the same variable)."""
PROVIDER_KEYS = ("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN", "CLAUDE_CODE_OAUTH_TOKEN", "OPENROUTER_API_KEY")


@dataclass
class Held:
    """What a turn knows of warm processes: the one it took, the one it leaves to keep."""

    warm: Warm | None = None
    fingerprint: str | None = None
    """Its launch plan's (when its process may be kept)."""
    kept: Spawned | None = None

    def processes(self) -> list[Spawned]:
        """The live harness processes the turn holds (to end when it is not parked)."""
        held = [self.kept, self.warm.spawned if self.warm is not None else None]
        unique = {id(p.process): p for p in held if p is not None}
        return [p for p in unique.values() if p.process.returncode is None]


class WarmHarnesses:
    """Mixed into :class:`~harness_run.runtime.local.LocalEngine`."""

    spec: AgentSpec
    version: str
    warm_pool: int
    agent_nice: int
    _warm: WarmProcesses
    _workspaces: Workspaces
    _filling: asyncio.Task[None] | None
    _pool_loop: asyncio.AbstractEventLoop | None
    _first: SpawnFirst | None
    _closed: bool
    _paths: Callable[[str, Mapping[str, Any] | None], SessionPaths]
    _delete_workspace: Callable[[str], None]
    _check_open: Callable[[], None]
    _prepare: Callable[
        [
            SessionRecord,
            Run,
            TurnPlan,
            dict[str, str],
            Callable[[AgentEvent], None],
            HarnessDriver,
            TurnCredentials | None,
        ],
        Awaitable[TurnContext],
    ]

    # --- warm harness processes ---------------------------------------------------------------

    @property
    def idle_ttl(self) -> float:
        """Seconds a session's harness process is kept after a turn (0: never kept)."""
        return self._warm.idle_ttl

    def warm_processes(self) -> list[WarmProcess]:
        """The harness processes this engine keeps: parked between a session's turns, or pooled
        for sessions to come; with their resident memory."""
        return self._warm.report()

    async def fill_pool(self) -> None:
        """Start the ``warm_pool`` harness processes now (in this event loop) and wait until they
        are started; sessions started without an id then take one each (the pool refills in the
        background). Nothing to do without ``warm_pool``."""
        self._check_open()
        self.fill_soon()
        if self._filling is not None:
            await asyncio.shield(self._filling)

    def fill_soon(self) -> None:
        """Start filling the pool in the background (in the running event loop, or from a worker
        thread in the loop that filled it before); ``fill_pool`` waits for it."""
        if self.warm_pool <= 0 or self._closed or (self._filling is not None and not self._filling.done()):
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            loop = self._pool_loop
            if loop is not None and loop.is_running() and not loop.is_closed():
                loop.call_soon_threadsafe(self.fill_soon)
            return  # no loop yet: the first session started in one fills it
        self._pool_loop = loop
        self._filling = loop.create_task(self._fill())

    async def _fill(self) -> None:
        while self._warm.pooled() < self.warm_pool and not self._closed:
            try:
                warm = await self._pool_process()
            except HarnessRunError as exc:
                _log.warning("the warm pool of %s is off: %s", self.spec.name, exc)
                self.warm_pool = 0
                return
            if self._closed:
                await end_warm(warm)
                return
            self._warm.pool(warm)

    async def _pool_process(self) -> Warm:
        """A harness process started for a new session id, in its prepared workspace, its plan's
        keys bound to the proxy only for the launch (dropped before it is pooled)."""
        driver = get_driver(self.spec.harness)
        sid = str(uuid.uuid4())
        record = SessionRecord(
            session_id=sid,
            engine=self.spec.name,
            version=self.version,
            harness=self.spec.harness,
            created_at=0.0,
            updated_at=0.0,
        )
        placeholders = {s.name: f"pooled-{s.name}" for s in self.spec.secrets if s.required}
        secrets = resolve_secrets(self.spec, placeholders)
        key = POOL_KEY_VARIABLE.get(self.spec.harness)
        if key is not None and not any(secrets.get(v) for v in PROVIDER_KEYS):
            secrets[key] = "pooled-placeholder"  # the turn brings its key: the proxy is there for it
        plan = TurnPlan(spec=self.spec, secrets=secrets, config=None)
        user = self._workspaces.user_for(self._paths(sid, None))
        creds = TurnCredentials(
            self.spec.max_budget_usd, self.spec.model, agent_uid=user.uid if user else None
        )
        try:
            ctx = await self._prepare(
                record, Run(sid, 1, "-", None), plan, plan.secrets, _ignore, driver, creds
            )
            launch = driver.launch(ctx)
            if not self._keeps(driver, launch, creds, secret_values(plan.secrets)):
                raise UsageError(
                    f"{self.spec.harness} processes of this spec cannot be pooled (a secret would be in "
                    "the process, or the harness reads one prompt per process): set warm_pool=0"
                )
            spawned = await spawn_harness(
                replace(launch, stdin=None),
                ctx.workspace,
                new_tag(),
                user,
                (ctx.workspace, ctx.home),
                self.agent_nice,
            )
        except BaseException:
            await creds.aclose()
            self._delete_workspace(sid)
            raise
        creds.end_turn()
        loop = asyncio.get_running_loop()
        return Warm(spawned, creds, fingerprint(launch, ctx.workspace), sid, 0, "pooled", loop)

    def _park(
        self, session_id: str, turn: Held, creds: TurnCredentials, outcome: TurnOutcome, n: int
    ) -> bool:
        """Keep the turn's harness process for the session's next turn: a turn that completed and
        was stored, whose process holds no secret value; its credentials drop every key now."""
        result, record = outcome.result, outcome.record
        if turn.kept is None or turn.fingerprint is None or outcome.cancelled or self._closed:
            return False
        if result.is_error or result.stop_reason != "completed" or record is None or record.turns != n:
            return False
        creds.end_turn()
        loop = asyncio.get_running_loop()
        self._warm.park(Warm(turn.kept, creds, turn.fingerprint, session_id, n, "parked", loop))
        return True

    def _keeps(
        self, driver: HarnessDriver, launch: LaunchPlan, creds: TurnCredentials, values: list[str]
    ) -> bool:
        """Whether the turn's process may be kept for the next turn: a CLI that takes the next prompt
        on its stdin, an engine that keeps processes, and nothing secret in what the process holds
        (its argv, environment and config files; a stdio MCP server's secrets)."""
        if not (driver.keeps_process and self._warm.keeps and self._first is None and creds.keepable):
            return False
        return not holds_secret(launch, secret_forms(values))

    async def _adopt_warm(
        self, turn: Held, launch: LaunchPlan, ctx: TurnContext, user: AgentUser | None
    ) -> Spawned | None:
        """The session's warm process, given this turn's prompt, when it was started with this
        turn's plan; else it ends (the turn starts a fresh one). With an agent uid, the workspace
        and home are handed over first, as before a spawn (this process rewrote files in them
        since: the checkpoint, the redaction of the live home)."""
        warm = turn.warm
        if warm is None:
            return None
        proc = warm.spawned.process
        if turn.fingerprint != warm.fingerprint or not launch.stdin or proc.stdin is None:
            turn.warm = None
            await asyncio.shield(end_kept(warm.spawned))
            return None
        if user is not None:
            await asyncio.to_thread(user.hand_over, ctx.workspace, ctx.home)
        proc.stdin.write(launch.stdin)
        return resumed(warm.spawned, launch)


def _ignore(_event: AgentEvent) -> None:
    """What the pool does with a setup event: no run sees it."""
