"""``WorkerEngine``: sessions whose turns run on the in-image worker, in sandboxes from a provider.

The engine is an :class:`~harness_run.runtime.Engine` and its sessions'
:class:`~harness_run.runtime._session.TurnBackend`: ``Session`` (runtime-neutral) calls
``execute_turn``, which reserves the turn in the store (exactly one client wins), acquires a sandbox
from its :class:`~harness_run.runtime.worker_client._provider.SandboxProvider` (a warm-pool claim on Agent
Sandbox, a local container, or the session's held one), starts the turn on the worker and mirrors
its event stream into the :class:`Run`; the turn's outcome is the session record the worker stored.
The worker writes the history; this side only marks the session running before the turn and writes
the outcome of a turn the worker could not finish (sandbox lost, claim never ready).
``SandboxEngine`` (Kubernetes) and ``ContainerEngine`` (local Docker isolation) are this engine with
their own provider.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import time
from typing import TYPE_CHECKING, Any, Literal

from harness_run import telemetry
from harness_run.compiler import SHORT_DIGEST_LEN
from harness_run.errors import (
    HarnessRunError,
    InfrastructureError,
    RunError,
    SessionBusyError,
    UsageError,
    redact,
)
from harness_run.events import ResultEvent, RunResult, UserEvent, parse_event
from harness_run.runtime._run import Run
from harness_run.runtime._session import DEFAULT_EXEC_OUTPUT, ExecResult, Session, TurnOutcome, TurnPlan
from harness_run.runtime._stored import StoredEngine
from harness_run.runtime.worker_client._provider import Claim, SandboxProvider
from harness_run.runtime.worker_client._slots import idle_donor, pool_key_of, shared_slot
from harness_run.security import inline_google_credentials, redact_event, secret_forms, secret_values
from harness_run.spec import AgentSpec
from harness_run.store import EngineRecord, HistoryStore, SessionRecord, TurnRecord, engine_view

if TYPE_CHECKING:
    from collections.abc import Coroutine

    from harness_run.runtime.worker_client._client import WorkerClient
    from harness_run.runtime.worker_client._protocol import TurnRequest

__all__ = ["WorkerEngine"]

_ATTACH_POLL = 0.25
_ORPHAN_CHECK = 2.0
_TOKEN_PROPAGATION = 90.0
_SANDBOX_POLL = 1.0
_GRACE = 2.0
_LEASE_RENEWAL = 2.0


class WorkerEngine(StoredEngine):
    """An engine version whose turns run on the in-image worker, in sandboxes from ``claims``.

    Closing it stops this process's running turns (the worker stores them, interrupted) and
    releases every sandbox this process holds; its store is closed too when ``owns_store`` (the
    engine's deployer opened it for the engine), else it stays open for its owner."""

    runtime = "sandbox"
    """The ``EngineRecord.runtime`` of this engine's versions."""
    shares_sandboxes = False
    """Shared sessions share one sandbox per branch (sandbox runtime; container: the host workdir)."""

    def __init__(
        self,
        record: EngineRecord,
        *,
        store: HistoryStore,
        claims: SandboxProvider,
        owns_store: bool = False,
    ) -> None:
        super().__init__(owns_store=owns_store)
        self.record = record
        self.spec = AgentSpec.from_dict(record.spec)
        self.store = engine_view(store, record.name)
        self.version = record.version
        self.claims = claims
        self._on_close: dict[str, tuple[dict[str, str], dict[str, Any] | None]] = {}
        """Sessions to commit (and push) on close: their last turn's secrets and turn config, in memory."""
        self.pool_after: float | None = None
        """``ClaimOptions.pool_after`` (sandbox runtime); None: no lending (container: host workdir)."""
        self._pool_keys: dict[str, str] = {}  # session -> its (remote, branch) key (_slots.py)
        self._gates: dict[str, asyncio.Lock] = {}  # shared slot -> the lock its turns take turns by

    @property
    def name(self) -> str:
        return self.record.name

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name} version={self.version[:SHORT_DIGEST_LEN]}>"

    # --- sessions ---------------------------------------------------------------------------------

    def get_session(self, session_id: str) -> Session:
        """Re-attach to a session from the store, from any process. If one of its turns is running
        (in a sandbox, started by any client), ``session.current_run`` follows it to its result."""
        self._check_open()
        held = self._sessions.get(session_id)
        if held is not None and held.current_run is not None and not held.current_run.done:
            return held  # its turn runs (or is followed) here
        hint = "in the history store (check that store= names the store it was deployed with)"
        record = self._stored_session(session_id, hint)
        if record.status == "running":  # a turn whose worker is gone is finished here, at once
            record = self._finish_dead_turn(session_id) or record
        session = self._adopt(record)  # a held one is refreshed: another client may have run turns
        if record.status == "running":
            try:
                asyncio.get_running_loop()
            except RuntimeError:
                raise UsageError(
                    f"session {session_id} is running turn {record.turns + 1}; call engine.get_session() "
                    "inside async code to follow it (session.current_run)"
                ) from None
            turn = record.turns + 1
            first = self.store.read_events(session_id, turn)
            prompt = next((e.text for e in first if isinstance(e, UserEvent)), "")
            run = Run(session_id, turn, prompt or "(re-attached)", followed=True)
            session.attach(run, self._follow(session, run))
        return session

    def versions(self) -> list[EngineRecord]:
        """Every deployed version of this engine in the store, oldest first."""
        self._check_open()
        return [e for e in self.store.list_engines(self.name) if e.runtime == self.runtime]

    async def _release(self) -> None:
        errors = [e for sid in list(self._on_close) if (e := await self._deliver(sid)) is not None]
        await self.claims.close()
        if errors:
            raise RunError("committing the sessions' work on close failed: " + "; ".join(errors))

    def _drop_pending(self) -> None:
        self._on_close.clear()

    async def _kill(self) -> None:
        """``aclose(kill=True)``: nothing committed; the sandboxes go first (their turns with them)."""
        self._drop_pending()
        await self.claims.close()

    def _release_now(self) -> None:
        pending, self._on_close = sorted(self._on_close), {}
        self.claims.release_now()
        if pending:  # without an event loop the workers cannot be asked to commit
            self._close_store()
            raise RunError(
                f"the work of sessions {pending} was not committed on close: a synchronous close() "
                "cannot ask their workers; close with `await engine.aclose()` (or end each session "
                "with `await session.aclose()`). Their last checkpoint keeps the work"
            )

    async def _close_session(self, session_id: str) -> None:
        self._pool_keys.pop(session_id, None)
        error = await self._deliver(session_id)
        claim = self.claims.held(session_id)  # a shared sandbox stays for the other sessions
        if claim is not None:
            await self.claims.release(claim)
        if error is not None:
            raise RunError(f"committing the session's work on close failed: {error}")

    async def _deliver(self, session_id: str) -> str | None:
        """``git.commit="on_close"``: the session's worker commits (and pushes) its work now, with
        the last turn's secrets; the error (redacted), or None."""
        pending = self._on_close.pop(session_id, None)
        if pending is None:
            return None
        secrets, turn_config = pending
        forms = secret_forms(secret_values(secrets))
        slot = self._slot(session_id)
        async with self._gates.get(slot) or contextlib.nullcontext():
            try:
                claim = await self.claims.acquire(slot)
            except HarnessRunError as exc:
                return f"session {session_id}: {redact(str(exc), forms)}"
            try:
                answer = await claim.client.deliver(session_id, secrets=secrets, turn_config=turn_config)
            except HarnessRunError as exc:
                claim.broken = True
                return f"session {session_id}: {redact(str(exc), forms)}"
            finally:
                self.claims.done_with(claim)
        return f"session {session_id}: {answer.error}" if answer.error else None

    def _delete_workspace(self, session_id: str) -> None:
        """The session's containers/sandboxes go (its workspace lives only there), held or left."""
        self._on_close.pop(session_id, None)
        self._pool_keys.pop(session_id, None)
        self.claims.forget_now(session_id)

    # --- turns (TurnBackend) ---------------------------------------------------------------------

    def execute_turn(self, session: Session, run: Run, plan: TurnPlan) -> Coroutine[Any, Any, TurnOutcome]:
        plan = dataclasses.replace(plan, secrets=inline_google_credentials(plan.spec.harness, plan.secrets))
        # reserved synchronously: another client's send() gets SessionBusyError (a dead worker's turn ends)
        try:
            self.store.reserve_turn(session.session_id, run.turn, self.claims.holder)
        except SessionBusyError:
            finished = self._finish_dead_turn(session.session_id)
            if finished is None or finished.turns != run.turn:
                raise
            session.refresh(finished)
            run.turn = finished.turns + 1  # nothing of this run has been emitted yet
            self.store.reserve_turn(session.session_id, run.turn, self.claims.holder)
        return self._turn(session, run, plan)

    async def _renew_lease(self, session_id: str, turn: int) -> None:
        while True:
            await asyncio.sleep(_LEASE_RENEWAL)
            with contextlib.suppress(HarnessRunError):  # a store hiccup: the next period retries
                await asyncio.to_thread(self.store.renew_turn, session_id, turn, self.claims.holder)

    def _finish_dead_turn(self, session_id: str, *, gone: bool = False) -> SessionRecord | None:
        """Store the session's next turn as interrupted when its worker is gone (``gone``: known to
        the caller; else its lease expired — the worker renews it while the turn runs, also after
        the client that started it died — or the provider sees no worker at once); the record
        after that, or None. A turn reserved by this process is never touched."""
        from harness_run.runtime.local import finish_orphan, lease_seconds

        return finish_orphan(
            self.store,
            session_id,
            ttl=lease_seconds(),
            own={self.claims.holder},
            native_exists=lambda _native_id: False,  # the worker finds the transcript itself
            gone=lambda _lease: gone or self.claims.worker_gone_now(session_id),
            why=(
                "the worker running this turn ended before the turn did (its sandbox or container was "
                "killed, or it crashed); the turn was stopped with it — send the next message to go "
                "on from the last snapshot"
            ),
        )

    async def _turn(self, session: Session, run: Run, plan: TurnPlan) -> TurnOutcome:
        values = secret_forms(secret_values(plan.secrets))  # the values and their encoded forms
        started = time.monotonic()
        sid = session.session_id
        await asyncio.to_thread(self._mark_running, sid)
        git = plan.spec.git
        if git is not None and git.commit == "on_close" and plan.spec.repos:
            self._on_close[sid] = (dict(plan.secrets), plan.config.to_dict() if plan.config else None)
        claim: Claim | None = None
        turn_id = f"{sid}.{run.turn}"
        # until the worker has the turn (and its lease), this client renews it: a slow claim is no dead turn
        renewing = asyncio.ensure_future(self._renew_lease(sid, run.turn))
        slot = self._slot(sid)
        gate = self._gates.setdefault(slot, asyncio.Lock()) if slot != sid else None
        gated = False
        try:
            if gate is not None:  # a shared sandbox: one turn at a time, the others wait here
                await gate.acquire()
                gated = True
            claim = await self._claim(session, run, plan, slot)
            from harness_run.runtime.worker_client._protocol import TurnRequest

            request = TurnRequest(
                turn_id=turn_id,
                session_id=sid,
                prompt=run.prompt,
                secrets=plan.secrets,
                turn_config=plan.config.to_dict() if plan.config else None,
                turn=run.turn,
            )
            client = claim.client
            await _start(client, request)
            renewing.cancel()

            async def interrupt() -> None:
                with contextlib.suppress(HarnessRunError):
                    await client.interrupt(turn_id)

            async def steer(text: str, message_id: str) -> bool:
                return await client.steer(turn_id, text, message_id=message_id)

            run.bind(interrupt=interrupt, steer=steer)
            await self._mirror(run, claim, turn_id, values)
        except asyncio.CancelledError:  # end the turn, and tell the session
            record: SessionRecord | None = None
            with contextlib.suppress(BaseException):
                record = await asyncio.shield(self._cancelled(session, run, plan, claim, turn_id, values))
            cancelled = RunResult(is_error=False, stop_reason="cancelled", error="the turn was cancelled")
            return TurnOutcome(run.result or cancelled, record, cancelled=True)
        except HarnessRunError as exc:
            if claim is not None:
                claim.broken = True
            return await self._fail(session, run, plan, claim, exc, values, started)
        finally:
            renewing.cancel()
            if claim is not None:
                self.claims.done_with(claim)
            if gate is not None and gated:
                gate.release()
        if run.result is None:  # the stream ended without a result
            if claim is not None:
                claim.broken = True
            exc = InfrastructureError(f"the worker at {claim.url if claim else '?'} ended the stream early")
            return await self._fail(session, run, plan, claim, exc, values, started)
        return TurnOutcome(run.result, await asyncio.to_thread(self._reload, sid, run.turn))

    def _slot(self, session_id: str) -> str:
        """The sandbox the session's turns run in: its own (its id) or a shared one (``_slots.py``)."""
        if not self.shares_sandboxes:
            return session_id
        held = self._sessions.get(session_id)
        record = held.record if held is not None else self.store.get_session(session_id)
        return (shared_slot(self.name, record.config) if record is not None else None) or session_id

    async def _claim(self, session: Session, run: Run, plan: TurnPlan, slot: str) -> Claim:
        """The sandbox for the turn: the one held for ``slot``, else an idle one of another session
        on the same (remote, branch) (branch pooling), else a new claim."""
        sid = session.session_id
        with telemetry.span("harness_run.claim", session=sid, turn=run.turn) as claiming:
            record = session.record
            pooled = self.pool_after is not None
            key = pool_key_of(self.name, record.config, plan.spec, record.owner) if pooled else None
            # only a session with nothing to restore takes over another's workspace (as local)
            if key is not None and self.claims.held(sid) is None and session.record.snapshot is None:
                busy = {
                    *self._on_close,
                    *(s for s, held in self._sessions.items() if held.status == "running"),
                }
                find = functools.partial(idle_donor, key, sid, self._pool_keys, busy, self.claims, self.store)
                donor = await asyncio.to_thread(find, self.pool_after or 0.0)
                if donor is not None and await self.claims.lend(donor, sid) is not None:
                    claiming.set(lent_by=donor)
            claim = await self.claims.acquire(slot)
            claiming.set(sandbox=claim.name)
        if key is not None:
            self._pool_keys[sid] = key
            claim.linger = 0.0 if sid in self._on_close else self.pool_after or 0.0
        return claim

    async def _mirror(self, run: Run, claim: Claim, turn_id: str, values: list[str]) -> None:
        """Mirror the worker's event stream into ``run`` until the result, while watching the
        Sandbox: one that is deleted or stops being Ready ends the turn at once (instead of after
        the client's reconnect window)."""

        async def stream() -> None:
            async for raw in claim.client.events(turn_id):
                event = run.emit(redact_event(parse_event(raw), values))
                if isinstance(event, ResultEvent):
                    return

        streaming = asyncio.ensure_future(stream())
        watching = asyncio.ensure_future(self._sandbox_gone(claim))
        try:
            await asyncio.wait({streaming, watching}, return_when=asyncio.FIRST_COMPLETED)
            if not streaming.done():  # the sandbox went away: a result may still be in flight
                await asyncio.wait({streaming}, timeout=_GRACE)
        finally:
            watching.cancel()
            if not streaming.done():
                streaming.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await streaming
        if not streaming.cancelled():
            streaming.result()  # raises the stream's error, if any
        if run.result is None:
            reason = watching.result() if watching.done() and not watching.cancelled() else "went away"
            raise InfrastructureError(f"the sandbox {reason} while the turn ran", retryable=True)

    async def _sandbox_gone(self, claim: Claim) -> str:
        """Return (with the reason) once the claim's sandbox is gone (deleted, not ready)."""
        while True:
            await asyncio.sleep(_SANDBOX_POLL)
            reason = await self.claims.sandbox_gone(claim)
            if reason is not None:
                return reason

    async def _cancelled(
        self,
        session: Session,
        run: Run,
        plan: TurnPlan,
        claim: Claim | None,
        turn_id: str,
        values: list[str],
    ) -> SessionRecord | None:
        """The awaiting task was cancelled: interrupt the worker's turn and mirror its last events
        (the worker stores the interrupted result); if that cannot be had, end the turn here.
        Returns the session's record after the turn. Killed (``aclose(kill=True)``): its sandbox is
        gone already, so the turn ends here at once."""
        if claim is not None and not self._killed:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._interrupt_and_drain(run, claim, turn_id, values), 30)
        if run.result is None:
            exc = InfrastructureError("the turn was cancelled")
            failed = await self._fail(session, run, plan, claim, exc, values, run.started_at, "cancelled")
            return failed.record
        return await asyncio.to_thread(self._reload, session.session_id, run.turn)

    async def _interrupt_and_drain(self, run: Run, claim: Claim, turn_id: str, values: list[str]) -> None:
        await claim.client.interrupt(turn_id)
        if run.result is None:
            async for raw in claim.client.events(turn_id, after=len(run.events) - 1):
                run.emit(redact_event(parse_event(raw), values))

    def _mark_running(self, session_id: str) -> SessionRecord | None:
        def update(record: SessionRecord) -> SessionRecord:
            return record.model_copy(update={"status": "running", "updated_at": time.time()})

        return self.store.update_session(session_id, update)

    def _reload(self, session_id: str, turn: int, wait: float = 5.0) -> SessionRecord | None:
        """The session record once the worker has written turn ``turn`` (it does so before it sends
        the result, so this is one read in practice)."""
        deadline = time.monotonic() + wait
        record = self.store.get_session(session_id)
        while record is not None and record.turns < turn and time.monotonic() < deadline:
            time.sleep(0.05)
            record = self.store.get_session(session_id)
        return record

    async def _fail(
        self,
        session: Session,
        run: Run,
        plan: TurnPlan,
        claim: Claim | None,
        exc: HarnessRunError,
        values: list[str],
        started: float,
        stop_reason: Literal["error", "cancelled"] = "error",
    ) -> TurnOutcome:
        """End a turn the worker could not finish: an error result, the history kept, the session
        ready for the next send (which resumes from the last snapshot on a new sandbox)."""
        spec = plan.spec
        where = f" in sandbox {claim.sandbox} (claim {claim.name})" if claim is not None else ""
        if stop_reason == "cancelled":
            message = f"turn {run.turn} of session {session.session_id} was cancelled{where}"
        else:
            message = redact(
                f"turn {run.turn} of session {session.session_id} failed{where}: {exc}; the history "
                "so far is kept: send again to resume from the last snapshot on a new sandbox",
                values,
            )
        if not run.events:  # the worker never started it: the log still begins with the prompt
            run.emit(UserEvent(text=redact(run.prompt, values), message_id=run.message_id))
        result = RunResult(
            is_error=stop_reason == "error",
            stop_reason=stop_reason,
            error=message,
            session_id=session.session_id,
            turn=run.turn,
            harness=spec.harness,
            model=spec.model,
            duration_s=round(time.monotonic() - started, 3),
        )
        if run.result is None:
            run.emit(ResultEvent(result=result))
        result = run.result or result
        record = await asyncio.to_thread(self._persist_failure, session.session_id, run, plan, result, values)
        if claim is not None:
            await self.claims.release(claim)
        return TurnOutcome(result, record)

    def _persist_failure(
        self, sid: str, run: Run, plan: TurnPlan, result: RunResult, values: list[str]
    ) -> SessionRecord | None:
        from harness_run.runtime.local import turn_settings

        spec = plan.spec
        self.store.append_events(sid, run.turn, run.events)  # idempotent: the worker's copies win
        current = self.store.get_session(sid)
        if current is not None and current.turns >= run.turn:
            return current  # the worker finished the turn after all: its records stand
        self.store.put_turn(
            TurnRecord(
                session_id=sid,
                turn=run.turn,
                prompt=redact(run.prompt, values),
                started_at=run.started_at,
                settings=turn_settings(spec),
                turn_config=plan.config.to_dict() if plan.config else {},
                secret_names=sorted(spec.secret_names),
                result=result,
                steers=[e.text for e in run.events if isinstance(e, UserEvent)][1:],
            )
        )

        def update(record: SessionRecord) -> SessionRecord | None:
            if record.turns >= run.turn:
                return None
            return record.model_copy(
                update={
                    "turns": run.turn,
                    "status": "failed" if result.is_error else "idle",
                    "stop_reason": result.stop_reason,
                    "last_result": result,
                    "updated_at": time.time(),
                }
            )

        return self.store.update_session(sid, update)

    # --- re-attach --------------------------------------------------------------------------------

    async def _follow(self, session: Session, run: Run) -> TurnOutcome:
        """Mirror a turn started elsewhere from the store's event log until its result.

        The turn is orphaned (an error result ends it, and the session can go on) when no claim of
        the session is left while no events come, or when no event at all arrived within the claim
        timeout (its client died before the worker started it)."""
        sid = session.session_id
        after = -1
        began = quiet_since = time.monotonic()
        checked = 0.0
        while run.result is None:
            events = await asyncio.to_thread(self.store.read_events, sid, run.turn, after_seq=after)
            for event in events:
                after = max(after, event.seq)
                run.emit(event)
            if run.result is not None:
                break
            now = time.monotonic()
            if events:
                quiet_since = now
            elif now - quiet_since > _ORPHAN_CHECK and now - checked > _ORPHAN_CHECK:
                checked = now
                record = await asyncio.to_thread(self.store.get_session, sid)
                if record is not None and record.turns >= run.turn:
                    continue  # finished meanwhile: the next read gets the result
                alive = await self.claims.has_sandbox(self._slot(sid))
                never_started = after < 0 and now - began > self.claims.claim_timeout + 30
                if not alive and not never_started:  # the worker died mid-turn: interrupted
                    finished = await asyncio.to_thread(self._finish_dead_turn, sid, gone=True)
                    if finished is not None:
                        await self._drop_claims(sid)
                        continue  # the next read gets the stored result
                if not alive or never_started:
                    await self._drop_claims(sid)
                    reason = "its sandbox is gone" if not alive else "its worker never started it"
                    exc = InfrastructureError(f"{reason} and the client that started it is gone")
                    plan = TurnPlan(spec=session.spec, secrets={}, config=None)
                    return await self._fail(session, run, plan, None, exc, [], time.monotonic())
            await asyncio.sleep(_ATTACH_POLL)
        record = await asyncio.to_thread(self._reload, sid, run.turn)
        await self._drop_claims(sid)  # the client that made them is gone: nobody else releases them
        assert run.result is not None
        return TurnOutcome(run.result, record)

    async def _drop_claims(self, session_id: str) -> None:
        slot = self._slot(session_id)
        if self.claims.held(slot) is not None:
            return
        with contextlib.suppress(InfrastructureError):
            await self.claims.drop_session(slot)

    # --- exec (TurnBackend) ------------------------------------------------------------------------

    async def execute_command(
        self,
        session: Session,
        command: str,
        secrets: dict[str, str],
        timeout: float,
        *,
        max_output: int = DEFAULT_EXEC_OUTPUT,
    ) -> ExecResult:
        """Run ``command`` in the session's sandbox (the held one, else a fresh claim that restores the
        workspace from the last snapshot)."""
        claim = await self.claims.acquire(self._slot(session.session_id))
        try:
            response = await claim.client.exec(session.session_id, command, timeout=timeout, secrets=secrets)
        except HarnessRunError:
            claim.broken = True
            raise
        finally:
            self.claims.done_with(claim)
        values = secret_forms(secret_values(secrets))  # the values and their encoded forms
        stdout, stderr = response.stdout, response.stderr
        truncated = response.truncated
        if len(stdout) > max_output or len(stderr) > max_output:
            stdout, stderr, truncated = stdout[:max_output], stderr[:max_output], True
        return ExecResult(
            exit_code=response.exit_code,
            stdout=redact(stdout, values),
            stderr=redact(stderr, values),
            truncated=truncated,
        )


async def _start(client: WorkerClient, request: TurnRequest) -> None:
    """Start the turn; a 401 right after the claim is retried briefly (on a real cluster the pod's
    annotations file, where the token hash arrives, is refreshed by the kubelet with a delay)."""
    deadline = time.monotonic() + _TOKEN_PROPAGATION
    while True:
        try:
            await client.start_turn(request)
            return
        except InfrastructureError as exc:
            if exc.status != 401 or time.monotonic() >= deadline:
                raise
        await asyncio.sleep(0.2)
