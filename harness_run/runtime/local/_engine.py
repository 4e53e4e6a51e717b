"""The local runtime: each turn is a harness CLI subprocess in a per-session workspace."""

from __future__ import annotations

import asyncio
import functools
import hashlib
import json
import logging
import shutil
import time
from collections.abc import Callable, Coroutine, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from harness_run import telemetry
from harness_run.errors import HarnessRunError, RunError, StoreError, UsageError, redact
from harness_run.events import AgentEvent, ResultEvent, RunResult, SetupEvent, UserEvent
from harness_run.harness import HarnessDriver, TurnContext, get_driver
from harness_run.runtime._agent_user import AgentUser
from harness_run.runtime._process import TurnProcess, end_kept
from harness_run.runtime._run import Run
from harness_run.runtime._session import DEFAULT_EXEC_OUTPUT, ExecResult, Session, TurnOutcome, TurnPlan
from harness_run.runtime._stored import StoredEngine
from harness_run.runtime._tracing import ToolSpans
from harness_run.runtime._workspace import WorkspaceLock, check_workspace
from harness_run.runtime.local._agent_uids import AgentUids, UidRegistry
from harness_run.runtime.local._egress import check_host_egress
from harness_run.runtime.local._exec import run_command
from harness_run.runtime.local._lease import LeaseKeeper, finish_orphan, lease_seconds, new_holder
from harness_run.runtime.local._pool import DEFAULT_POOL_AFTER
from harness_run.runtime.local._results import complete_result, store_failed
from harness_run.runtime.local._settings import turn_settings
from harness_run.runtime.local._spawn_first import SpawnFirst, warm_up
from harness_run.runtime.local._steps import WorkspaceSteps
from harness_run.runtime.local._warm import (
    DEFAULT_IDLE_TTL,
    DEFAULT_MAX_IDLE,
    WarmProcesses,
    check_warm,
    fingerprint,
)
from harness_run.runtime.local._warm_engine import Held, WarmHarnesses
from harness_run.runtime.local._workspace import (
    SessionPaths,
    Workspaces,
    resolve_workdir,
    scrub_git_credentials,
)
from harness_run.security import (
    EventRedactor,
    TurnCredentials,
    agent_env,
    redact_event,
    redact_tree,
    secret_forms,
    secret_values,
)
from harness_run.spec import AgentSpec, SessionConfig, WorkspaceOptions
from harness_run.store import EngineRecord, HistoryStore, SessionRecord, SqliteStore, TurnRecord, engine_view
from harness_run.vocab.version import __version__
from harness_run.vocab.workdir import default_workdir

__all__ = ["LocalEngine", "TurnEnv", "default_workdir", "spec_version", "turn_settings"]

_log = logging.getLogger("harness_run.runtime")


TurnEnv = Callable[[AgentSpec, Mapping[str, str]], Mapping[str, str]]
"""Extra variables for a turn's process, from its effective spec and secrets (the worker's Vertex mode)."""


def spec_version(spec: AgentSpec) -> str:
    """The local engine version: a digest of the spec and the library version."""
    body = json.dumps(spec.to_dict(), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(f"{__version__}\n{body}".encode()).hexdigest()[:12]


class LocalEngine(WarmHarnesses, WorkspaceSteps, StoredEngine):
    """An agent deployed on this machine (an :class:`~harness_run.runtime.Engine`): each turn is a
    harness CLI subprocess in a per-session workspace under ``workdir``; history in its store (the
    workdir's SQLite store unless ``store`` is given; a given store is the caller's to close).

    Turns are exclusive across processes: each is reserved in the store before it starts and its
    lease renewed while it runs; a turn left by a process that died is stored as ``interrupted``
    when the session is next re-attached or sent to (``finish_orphans``; the worker leaves that to
    the client that reserved its turns)."""

    def __init__(
        self,
        spec: AgentSpec,
        *,
        workdir: str | Path | None = None,
        store: HistoryStore | None = None,
        claude_binary: str | None = None,
        codex_binary: str | None = None,
        opencode_binary: str | None = None,
        turn_env: TurnEnv | None = None,
        finish_orphans: bool = True,
        pool_after: float = DEFAULT_POOL_AFTER,
        agent_user: AgentUser | AgentUids | None = None,
        egress_enforced: bool = False,
        idle_ttl: float = DEFAULT_IDLE_TTL,
        max_idle_processes: int = DEFAULT_MAX_IDLE,
        warm_pool: int = 0,
        agent_nice: int = 0,
    ) -> None:
        if not isinstance(spec, AgentSpec):  # pyright: ignore[reportUnnecessaryIsInstance]
            raise UsageError("local.deploy() takes an AgentSpec; load files with AgentSpec.from_yaml(path)")
        check_host_egress(spec, enforced=egress_enforced)
        super().__init__(owns_store=store is None)
        self.spec = spec
        self.workdir = resolve_workdir(workdir if workdir is not None else default_workdir())
        self.store = engine_view(store, spec.name) if store is not None else SqliteStore(self.workdir)
        self.version = spec_version(spec)
        self.binaries = {"claude-code": claude_binary, "codex": codex_binary, "opencode": opencode_binary}
        self._turn_env = turn_env
        users = UidRegistry(self.workdir, agent_user) if isinstance(agent_user, AgentUids) else agent_user
        self._workspaces = Workspaces(self.workdir, users)
        """``agent_user``: the harness, its tools and exec commands run as that uid (the worker), or
        each session as a uid of its own from that range (``serve``; ``_agent_uids.py``)."""
        self._on_close: dict[str, tuple[AgentSpec, dict[str, str]]] = {}
        """Sessions to commit (and push) on close: their last turn's spec and secrets, in memory."""
        self._lease = lease_seconds()
        self._finish_orphans = finish_orphans
        if pool_after < 0:
            raise UsageError(f"pool_after={pool_after!r} must be >= 0 seconds (0: lend once a turn ends)")
        self.pool_after = pool_after
        """Seconds a session's workspace must have been idle before a new session on the same
        (remote, branch) takes it over (see ``runtime/local/_pool.py``)."""
        self._keepers: dict[str, LeaseKeeper] = {}  # running turns: lease holder -> its keeper
        self._unstored: dict[tuple[str, int], str] = {}
        """Turns of this engine that ended but could not be stored -> their holder (for the retry)."""
        self._first: SpawnFirst | None = None
        self._warm = WarmProcesses(check_warm(idle_ttl, max_idle_processes, warm_pool), max_idle_processes)
        """Harness processes kept between a session's turns, and the pool (``_warm.py``)."""
        self.warm_pool = warm_pool
        """Harness processes kept started for sessions to come (``fill_pool``)."""
        self._filling: asyncio.Task[None] | None = None
        self.agent_nice = agent_nice
        """The harness processes run this much below this process's CPU priority (``serve``: 10)."""
        self._pool_loop: asyncio.AbstractEventLoop | None = None
        self.store.put_engine(
            EngineRecord(name=spec.name, version=self.version, spec=spec.to_dict(), created_at=time.time())
        )
        self.fill_soon()  # deployed in an event loop: the pool starts filling now

    def __repr__(self) -> str:
        return f"<LocalEngine {self.name} version={self.version} workdir={self.workdir}>"

    def start_session(
        self,
        config: SessionConfig | Mapping[str, Any] | None = None,
        *,
        session_id: str | None = None,
        branch: str | None = None,
        base_branch: str | None = None,
    ) -> Session:
        """See :meth:`Engine.start_session`. With ``warm_pool``, a new session without an id, a
        config or a branch takes a pooled harness process: its id is the pooled one's."""
        self._check_open()
        pooled = session_id is None and config is None and branch is None and base_branch is None
        if pooled:
            session_id = self._warm.claim()
        session = super().start_session(config, session_id=session_id, branch=branch, base_branch=base_branch)
        if session_id is None:  # the pool was empty: fill it now (a taken one refills after its turn)
            self.fill_soon()
        return session

    def spawn_first(self, link: SpawnFirst) -> None:
        """``harness-run run``'s link for the session it starts next: the harness it spawned from
        the launch-plan cache, to adopt or stop; the cache entry to write (``_spawn_first.py``)."""
        self._first = link

    # --- sessions -----------------------------------------------------------------------------

    def get_session(self, session_id: str) -> Session:
        """Re-attach to a session from its stored history (works from any process)."""
        self._check_open()
        held = self._sessions.get(session_id)
        if held is not None:
            return held
        record = self._stored_session(session_id, f"in the store at {self.workdir}")
        if record.status == "running":  # the process that ran it is gone
            record = record.model_copy(update={"status": "idle"})
        session = self._adopt(record)
        finished = self._finish_orphan(session_id, session.spec, record.config)
        if finished is not None:
            session.refresh(finished)
        return session

    def _check_workspace(self, options: WorkspaceOptions) -> WorkspaceOptions:
        self._workspaces.check_host_dir(options.host_dir)
        return check_workspace(options, workdir=self.workdir)

    def _paths(self, session_id: str, config: Mapping[str, Any] | None) -> SessionPaths:
        """The session's paths, from its stored config (its workspace options and branch)."""
        return self._workspaces.paths(session_id, config, self.name)

    def _delete_workspace(self, session_id: str) -> None:
        """The session's own folder goes; a shared workspace or a host directory stays."""
        self._warm.end(session_id)
        self._on_close.pop(session_id, None)
        shutil.rmtree(self._workspaces.paths(session_id).root, ignore_errors=True)
        self._workspaces.release_user(session_id)

    def versions(self) -> list[EngineRecord]:
        """Every version of this engine in the workdir's store (any isolation), oldest first."""
        self._check_open()
        return self.store.list_engines(self.name)

    # --- turns --------------------------------------------------------------------------------

    def _finish_orphan(
        self, session_id: str, spec: AgentSpec, config: Mapping[str, Any] | None
    ) -> SessionRecord | None:
        """Finish the session's next turn if the process that reserved it is gone (see ``_lease``);
        ``spec`` and ``config`` are the session's."""
        if not self._finish_orphans:
            return None
        driver = get_driver(spec.harness)
        paths = self._paths(session_id, config)

        def native_exists(native_id: str | None) -> bool:
            probe = TurnContext(
                spec=spec.model_copy(update={"checkpoint": False}),  # a look, no scrubbing
                prompt="",
                session_id=session_id,
                turn=0,
                workspace=paths.workspace,
                home=paths.home,
                env={},
                resume=True,
                native_session_id=native_id,
            )
            return bool(driver.native_files(probe))

        return finish_orphan(
            self.store, session_id, ttl=self._lease, own=self._keepers.keys(), native_exists=native_exists
        )

    def execute_turn(self, session: Session, run: Run, plan: TurnPlan) -> Coroutine[Any, Any, TurnOutcome]:
        # Reserve synchronously (one winner across processes), so a second sender's send() raises
        # SessionBusyError at once; a turn left by a dead process is finished first.
        finished = self._finish_orphan(session.session_id, session.spec, session.record.config)
        if finished is not None and finished.turns == run.turn:
            session.refresh(finished)
            run.turn = finished.turns + 1  # nothing of this run has been emitted yet
        # a turn of this engine whose result could not be stored keeps its reservation: the retry
        # under the same number takes it over (reserving again with the same holder is idempotent)
        holder = self._unstored.pop((session.session_id, run.turn), None) or new_holder()
        self.store.reserve_turn(session.session_id, run.turn, holder)
        keeper = LeaseKeeper(self.store, run, holder, period=min(2.0, self._lease / 4))
        self._keepers[holder] = keeper
        return self._turn(session, run, plan, holder)

    async def _turn(self, session: Session, run: Run, plan: TurnPlan, holder: str) -> TurnOutcome:
        keeper = self._keepers[holder]
        try:
            keeper.start()
            outcome = await self._turn_body(session, run, plan, keeper)
            if outcome.record is not None and outcome.record.turns < run.turn:
                self._unstored[(session.session_id, run.turn)] = holder
            return outcome
        finally:
            await keeper.stop()
            self._keepers.pop(holder, None)

    async def _turn_body(
        self, session: Session, run: Run, plan: TurnPlan, keeper: LeaseKeeper
    ) -> TurnOutcome:
        """The turn, holding its workspace's lock from before the workspace is prepared until the
        result is stored (turns in one workspace — shared mode, a host directory — take turns), with
        its model proxy and git broker: the harness gets turn tokens, not keys."""
        paths = self._paths(session.session_id, session.record.config)
        lock = WorkspaceLock(paths.lock, f"session {session.session_id} turn {run.turn}")
        user = self._workspaces.user_for(paths)
        turn = Held(warm=self._warm.take(session.session_id, run.turn - 1))
        if turn.warm is not None:  # its credentials serve this turn: same tokens, this turn's keys
            creds = turn.warm.creds
            creds.begin_turn(plan.spec.max_budget_usd, plan.spec.model)
        else:
            creds = TurnCredentials(  # metered, budget enforced; sockets opened to the agent's uid
                plan.spec.max_budget_usd,
                plan.spec.model,
                agent_uid=user.uid if user is not None else None,
                proxy_socket=self._first.proxy_socket(session.session_id) if self._first else None,
            )
        parked = False
        try:
            outcome = await self._locked_turn(session, run, plan, keeper, lock, creds, turn)
            parked = self._park(session.session_id, turn, creds, outcome, run.turn)
            return outcome
        finally:
            lock.release()
            if not parked:  # the turn's process (kept, or a warm one it took) ends with the turn
                for left in {
                    id(p.process): p for p in (turn.kept, turn.warm and turn.warm.spawned) if p
                }.values():
                    await asyncio.shield(end_kept(left))
                await creds.aclose()
            self.fill_soon()  # a pool a session took from refills now that its turn is over

    async def _locked_turn(
        self,
        session: Session,
        run: Run,
        plan: TurnPlan,
        keeper: LeaseKeeper,
        lock: WorkspaceLock,
        creds: TurnCredentials,
        turn: Held,
    ) -> TurnOutcome:
        spec, secrets = plan.spec, plan.secrets
        if self._turn_env is not None:
            secrets = {**secrets, **self._turn_env(spec, secrets)}
        values = secret_values(secrets)
        tools = ToolSpans(telemetry.NOOP)  # one span per tool call, under the harness's span
        redactor = EventRedactor(secret_forms(values))  # a secret split across two deltas too

        def emit(event: AgentEvent) -> None:
            for redacted in redactor.redact(event):
                tools.see(run.emit(redacted))
            if event.type == "started":  # store the harness's own session id at once
                keeper.nudge()

        started = time.monotonic()
        record = session.record
        emit(UserEvent(text=run.prompt, message_id=run.message_id))
        driver = get_driver(spec.harness)
        ctx: TurnContext | None = None
        process: TurnProcess | None = None
        try:
            await asyncio.to_thread(keeper.beat)  # the prompt is in the store before anything starts

            def waiting(holder: str) -> None:
                who = holder or "another turn"
                emit(SetupEvent(step=f"waiting for the workspace {lock.path.parent}: {who} is using it"))

            await lock.acquire(waiting)
            with telemetry.span("harness_run.setup", session=record.session_id, turn=run.turn):
                ctx = await self._prepare(record, run, plan, secrets, emit, driver, creds)
            user = self._workspaces.user_for(self._paths(record.session_id, record.config))
            launch, spawned = driver.launch(ctx), None
            if self._first is not None:  # adopt the harness `harness-run run` spawned, or cache this plan
                plain = user is None and self._turn_env is None and run.turn == 1
                forms = secret_forms(values)
                spawned = await self._first.launch(driver, ctx, launch, creds, forms, cacheable=plain)
            keep = self._keeps(driver, launch, creds, values)
            turn.fingerprint = fingerprint(launch, ctx.workspace) if keep else None
            spawned = spawned or await self._adopt_warm(turn, launch, ctx, user)
            process = TurnProcess(
                launch,
                driver.parser(ctx),
                ctx.workspace,
                emit,
                spec.timeout,
                on_spawn=None if spawned else warm_up,  # adopted: the harness is already working
                user=user,
                hand_over=(ctx.workspace, ctx.home),
                spawned=spawned,
                keep=keep,
                nice=self.agent_nice,
            )
            creds.ask_people(self.store, run, emit, ctx.workspace, process, keeper.nudge)  # spec.approvals
            await creds.start()  # after the adoption: the proxy never serves a process that was stopped
            creds.on_budget(functools.partial(process.stop, "max_budget"))
            creds.on_failure(functools.partial(process.stop, "error"))

            async def steer(text: str, message_id: str) -> bool:
                payload = driver.steer(text)
                ok = payload is not None and await process.steer(payload)
                if ok:
                    emit(UserEvent(text=text, message_id=message_id))
                return ok

            run.bind(interrupt=process.stop, steer=steer, kill=process.kill)
            with telemetry.span("harness_run.harness", harness=spec.harness) as tools.parent:
                creds.trace_under(tools.parent)
                result = creds.settle(await process.run())
                turn.kept = process.kept
            tools.close()
            result = await self._after_turn_git(record, spec, secrets, result, run.turn)
        except asyncio.CancelledError:  # end the turn, store it, and tell the session
            result = (process.cancelled_result if process is not None else None) or RunResult(
                is_error=False, stop_reason="cancelled", error="the turn was cancelled"
            )
            finish = self._finish(record, run, plan, ctx, driver, result, started, values)
            outcome = await asyncio.shield(finish)
            return TurnOutcome(outcome.result, outcome.record, cancelled=True)
        except HarnessRunError as exc:
            result = RunResult(is_error=True, stop_reason="error", error=redact(str(exc), values))
        return await self._finish(record, run, plan, ctx, driver, result, started, values)

    async def _prepare(
        self,
        record: SessionRecord,
        run: Run,
        plan: TurnPlan,
        secrets: dict[str, str],
        emit: Callable[[AgentEvent], None],
        driver: HarnessDriver,
        creds: TurnCredentials | None = None,
    ) -> TurnContext:
        """Workspace (made, or restored from the checkpoint), packages, environment and the
        harness's native session files: the turn's context, ready to launch."""
        spec = plan.spec
        paths = self._paths(record.session_id, record.config)
        await self._ensure_workspace(record, spec, paths, secrets, emit, driver)
        bin_dir = await self._workspaces.package_env(spec, lambda _s, d: emit(SetupEvent(step=d)))
        env = agent_env(spec, secrets, home=str(paths.home), path_prefix=[str(bin_dir)] if bin_dir else [])
        if creds is not None:  # keys stay here; the harness gets the proxy, the git helper, turn tokens
            env = creds.apply(spec, secrets, env)
        ctx = TurnContext(
            spec=creds.launch_spec(spec) if creds is not None else spec,
            prompt=run.prompt,
            session_id=record.session_id,
            turn=run.turn,
            workspace=paths.workspace,
            home=paths.home,
            env=env,
            resume=record.native_started,
            native_session_id=record.native_session_id,
            prompt_overridden=bool(plan.config and "system_prompt" in plan.config.model_fields_set),
            binary=self.binaries.get(spec.harness),
        )
        await self._restore_native(record, driver, ctx)
        # a transcript from a turn whose owner died unrecorded (a worker killed in turn 1): go on from
        # it — unless it is this turn's own, by the harness `harness-run run` spawned first
        if (
            ctx.resume
            or not driver.native_files(ctx)
            or (self._first and self._first.spawned(ctx.session_id))
        ):
            return ctx
        return replace(ctx, resume=True)

    async def _finish(
        self,
        record: SessionRecord,
        run: Run,
        plan: TurnPlan,
        ctx: TurnContext | None,
        driver: HarnessDriver,
        result: RunResult,
        started: float,
        values: list[str],
    ) -> TurnOutcome:
        """The turn's result event, checkpoint and records; the session's record after the turn.

        A store fault (full disk, …) before the result event makes the turn's result an error naming
        it, and leaves the session at its previous turn, usable (never stuck ``running``)."""
        spec = plan.spec
        result = complete_result(spec, record.session_id, run, result, started)
        if ctx is not None:  # the harness's own files in the live home: no secret value left
            await asyncio.to_thread(redact_tree, ctx.home, secret_forms(values))
        native = driver.native_files(ctx) if ctx is not None else []
        snapshot = record.snapshot
        try:
            with telemetry.span("harness_run.store.write", session=record.session_id, turn=run.turn):
                if ctx is not None and spec.repos:  # no token in a remote URL or git config, ever stored
                    await asyncio.to_thread(scrub_git_credentials, ctx.workspace, spec, secret_forms(values))
                if spec.checkpoint and ctx is not None:
                    root = driver.native_root(ctx)
                    host_dir = self._paths(record.session_id, record.config).host_dir
                    snapshot = await asyncio.to_thread(
                        self._checkpoint, ctx, root, native, values, run.turn, not host_dir
                    )
                pending = run.events[run.flushed :]
                await asyncio.to_thread(self.store.append_events, record.session_id, run.turn, pending)
                run.flushed = max(run.flushed, len(run.events))
        except StoreError as exc:
            return store_failed(record, run, result, exc, values)
        run.emit(redact_event(ResultEvent(result=result), secret_forms(values)))
        result = run.result or result
        update = {
            "turns": run.turn,
            "updated_at": time.time(),
            "last_result": result,
            "status": "failed" if result.is_error else "idle",
            "stop_reason": result.stop_reason,
            "native_started": record.native_started or bool(native),
            "snapshot": snapshot,
            "native_session_id": result.native_session_id or record.native_session_id,
            "workspace_ready": record.workspace_ready or ctx is not None,
            "commit_sha": result.commit_sha or record.commit_sha,
            "pushed_ref": result.pushed_ref or (None if result.commit_sha else record.pushed_ref),
        }
        after = record.model_copy(update=update)
        turn = TurnRecord(
            session_id=record.session_id,
            turn=run.turn,
            prompt=redact(run.prompt, values),
            started_at=run.started_at,
            settings=turn_settings(spec),
            turn_config=plan.config.to_dict() if plan.config else {},
            secret_names=sorted(n for n in spec.secret_names),
            result=result,
            steers=[e.text for e in run.events if isinstance(e, UserEvent)][1:],
            snapshot=snapshot if snapshot is not record.snapshot else None,
        )
        try:
            with telemetry.span("harness_run.store.write", session=record.session_id, turn=run.turn):
                await asyncio.to_thread(self._persist, after, turn, run.events[run.flushed :])
        except StoreError as exc:  # the result is out already: the caller still gets the error
            failed = store_failed(record, run, result, exc, values)
            return TurnOutcome(failed.result, failed.record)
        return TurnOutcome(result, after)

    async def _close_session(self, session_id: str) -> None:
        self._warm.end(session_id)
        await asyncio.to_thread(self._close_deliveries, session_id)

    async def _release(self) -> None:
        if self._filling is not None:
            self._filling.cancel()
            await asyncio.gather(self._filling, return_exceptions=True)
        self._drop_pooled(await self._warm.aclose())
        await asyncio.to_thread(self._close_deliveries)

    def _drop_pending(self) -> None:
        self._on_close.clear()
        self._drop_pooled(self._warm.close_now())  # killed: the warm processes go at once

    def _drop_pooled(self, pooled: list[str]) -> None:
        """The workspaces of pooled processes no session took."""
        for session_id in pooled:
            self._delete_workspace(session_id)

    def _release_now(self) -> None:
        self._drop_pooled(self._warm.close_now())
        try:
            self._close_deliveries()
        except RunError:
            self._close_store()  # close() skips it when this raises
            raise

    def _persist(self, record: SessionRecord, turn: TurnRecord, events: list[AgentEvent]) -> None:
        self.store.append_events(record.session_id, turn.turn, events)
        self.store.put_turn(turn)
        self.store.put_session(record)

    async def execute_command(
        self,
        session: Session,
        command: str,
        secrets: dict[str, str],
        timeout: float,
        *,
        max_output: int = DEFAULT_EXEC_OUTPUT,
    ) -> ExecResult:
        paths = self._paths(session.session_id, session.record.config)
        paths.create()
        spec = session.spec
        bin_dir = await self._workspaces.package_env(spec, lambda _s, _d: None)  # the agent's packages
        env = agent_env(spec, secrets, home=str(paths.home), path_prefix=[str(bin_dir)] if bin_dir else [])
        if (user := self._workspaces.user_for(paths)) is not None:
            await asyncio.to_thread(user.hand_over, paths.workspace, paths.home)
        return await run_command(
            command,
            cwd=paths.workspace,
            env=env,
            timeout=timeout,
            max_output=max_output,
            secret_values=secret_forms(secret_values(secrets)),
            user=user,
        )
