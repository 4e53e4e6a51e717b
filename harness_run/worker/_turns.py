"""The worker's state: one local engine over the shared history store, one turn at a time.

Each turn re-attaches to its session from the store (``LocalEngine.get_session``) and runs it with
the local runtime's code path. While it runs, new events go to the store every ``FLUSH_INTERVAL``
seconds (``run.flushed`` tells the engine's end-of-turn write where to continue); the engine itself
writes the result, the turn record and the session record before the turn counts as finished.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shutil
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from harness_run.errors import (
    HarnessRunError,
    SessionBusyError,
    SessionNotFoundError,
    UsageError,
    redact,
)
from harness_run.events import AgentEvent
from harness_run.runtime import AgentUser, Run, Session
from harness_run.runtime.local import DEFAULT_POOL_AFTER, LocalEngine, Workspaces
from harness_run.runtime.worker_client import (
    DeliverRequest,
    DeliverResponse,
    ExecRequest,
    ExecResponse,
    TurnInfo,
    TurnRequest,
)
from harness_run.security import secret_values
from harness_run.spec import AgentSpec, LocalSkill, SessionConfig, TurnConfig, effective_spec
from harness_run.store import (
    ApprovalRecord,
    ApprovalStore,
    EngineRecord,
    HistoryStore,
    SessionRecord,
    SessionUpdate,
    TurnLease,
    TurnRecord,
)
from harness_run.worker._vertex import vertex_env

__all__ = ["FLUSH_INTERVAL", "TurnState", "Worker", "WorkerStore", "image_spec"]

log = logging.getLogger("harness_run.worker")

FLUSH_INTERVAL = 0.25
"""Seconds between mid-turn event flushes to the store (the contract: at most 0.5 s)."""

_TURN_MARKER = ".worker-turns"


class WorkerStore:
    """The history store as the worker uses it: everything passes through, except that the local
    engine's own engine record is not written (the deployer wrote the engine's record), and that
    the engine runs a turn under the reservation of the client that asked for it (the remote engine
    reserved it before it sent the request): the worker renews that client's lease while it runs."""

    def __init__(self, inner: HistoryStore) -> None:
        self.inner = inner
        self._adopted: dict[str, str] = {}
        """The local engine's holder of a turn -> the client's holder it runs under."""

    def put_engine(self, record: EngineRecord) -> None:
        return None

    def get_engine(self, name: str, version: str | None = None) -> EngineRecord | None:
        return self.inner.get_engine(name, version)

    def list_engines(self, name: str | None = None) -> list[EngineRecord]:
        return self.inner.list_engines(name)

    def delete_engine(self, name: str, version: str) -> None:
        self.inner.delete_engine(name, version)

    def put_session(self, record: SessionRecord) -> None:
        self.inner.put_session(record)

    def get_session(self, session_id: str) -> SessionRecord | None:
        return self.inner.get_session(session_id)

    def update_session(self, session_id: str, update: SessionUpdate) -> SessionRecord | None:
        return self.inner.update_session(session_id, update)

    def list_sessions(self, engine: str | None = None) -> list[SessionRecord]:
        return self.inner.list_sessions(engine)

    def reserve_turn(self, session_id: str, turn: int, holder: str) -> None:
        lease = self.inner.get_turn_lease(session_id, turn)
        if lease is None:  # a request from a client that reserved nothing: reserve it here
            self.inner.reserve_turn(session_id, turn, holder)
        else:
            self._adopted[holder] = lease.holder

    def renew_turn(self, session_id: str, turn: int, holder: str) -> None:
        self.inner.renew_turn(session_id, turn, self._adopted.get(holder, holder))

    def get_turn_lease(self, session_id: str, turn: int) -> TurnLease | None:
        return self.inner.get_turn_lease(session_id, turn)

    def put_turn(self, record: TurnRecord) -> None:
        self.inner.put_turn(record)

    def list_turns(self, session_id: str) -> list[TurnRecord]:
        return self.inner.list_turns(session_id)

    def append_events(self, session_id: str, turn: int, events: Sequence[AgentEvent]) -> None:
        self.inner.append_events(session_id, turn, events)

    def read_events(
        self, session_id: str, turn: int | None = None, *, after_seq: int = -1
    ) -> list[AgentEvent]:
        return self.inner.read_events(session_id, turn, after_seq=after_seq)

    def delete_session(self, session_id: str) -> None:
        self.inner.delete_session(session_id)

    # approvals: the turn's guard writes and waits on them here; clients decide them in the same
    # store (from any process), so the waiting guard reads their decisions back from it
    def _approvals(self) -> ApprovalStore:
        if not isinstance(self.inner, ApprovalStore):
            raise UsageError(f"the worker's history store ({type(self.inner).__name__}) keeps no approvals")
        return self.inner

    def put_approval(self, record: ApprovalRecord) -> None:
        self._approvals().put_approval(record)

    def get_approval(self, session_id: str, request_id: str) -> ApprovalRecord | None:
        return self._approvals().get_approval(session_id, request_id)

    def list_approvals(self, session_id: str, *, pending: bool = False) -> list[ApprovalRecord]:
        return self._approvals().list_approvals(session_id, pending=pending)

    def decide_approval(
        self,
        session_id: str,
        request_id: str,
        *,
        decision: Literal["allow", "deny"] | None = None,
        answer: str | None = None,
        by: Literal["client", "timeout"],
        reason: str | None = None,
        key_id: str | None = None,
    ) -> ApprovalRecord:
        return self._approvals().decide_approval(
            session_id, request_id, decision=decision, answer=answer, by=by, reason=reason, key_id=key_id
        )

    def put_blob(self, data: bytes) -> str:
        return self.inner.put_blob(data)

    def delete_blob(self, key: str) -> None:
        self.inner.delete_blob(key)

    def get_blob(self, key: str) -> bytes | None:
        return self.inner.get_blob(key)

    def close(self) -> None:
        self.inner.close()


def image_spec(spec: AgentSpec, root: Path | None) -> AgentSpec:
    """The spec as the worker runs it inside the compiled image (``root`` = ``$HARNESS_RUN_ROOT``).

    - ``checkpoint`` on: sandboxes come and go, so every turn leaves a snapshot to resume from;
    - skills from the image's staged copies (``<root>/skills/<name>/``), not their build-time
      sources (a local path of the build machine, a git URL the sandbox may not reach);
    - no ``packages``: the image installed them into its own environment (on ``PATH``).
    """
    update: dict[str, Any] = {"checkpoint": True}
    if root is not None:
        staged = root / "skills"
        if spec.skills and all((staged / s.staged_name).is_dir() for s in spec.skills):
            update["skills"] = tuple(
                LocalSkill(path=str(staged / s.staged_name), name=s.staged_name) for s in spec.skills
            )
        if spec.packages and (root / "requirements" / "agent.txt").is_file():
            update["packages"] = ()
    return spec.model_copy(update=update)


@dataclass
class TurnState:
    """One turn this worker started (kept for idempotent retries and stream re-attach)."""

    turn_id: str
    session: Session
    run: Run
    secrets: list[str]
    finished: asyncio.Event = field(default_factory=asyncio.Event)
    error: str | None = None
    steers: dict[str, bool] = field(default_factory=dict[str, bool])
    task: asyncio.Task[None] | None = None

    def info(self) -> TurnInfo:
        if self.error is not None:
            status = "failed"
        elif not self.finished.is_set():
            status = "running"
        else:
            status = self.run.status
            status = "failed" if status == "running" else status
        return TurnInfo(
            turn_id=self.turn_id, session_id=self.run.session_id, turn=self.run.turn, status=status
        )


class Worker:
    """Turns, steering, exec, shutdown. Safe to use from one event loop."""

    def __init__(
        self,
        spec: AgentSpec,
        store: HistoryStore,
        workdir: Path,
        *,
        env: Mapping[str, str] | None = None,
        image_root: Path | None = None,
        pool_after: float | None = None,
        agent_user: AgentUser | None = None,
    ) -> None:
        self.spec = image_spec(spec, image_root)
        self.agent_user = agent_user
        """The agent's processes run as this other uid (see ``_privileges``)."""
        self.pool_after = DEFAULT_POOL_AFTER if pool_after is None else pool_after
        self.store = WorkerStore(store)
        self.workdir = workdir
        self.env = dict(os.environ if env is None else env)
        self.turns: dict[str, TurnState] = {}
        self.current: TurnState | None = None
        self.closing = False
        self._start_lock = asyncio.Lock()
        self._local: LocalEngine | None = None

    @property
    def busy(self) -> bool:
        return self.current is not None and not self.current.finished.is_set()

    def _engine(self) -> LocalEngine:
        """The worker's one engine: it keeps a session's harness process between the turns this
        sandbox runs (a stale one — the session ran elsewhere meanwhile — is never used)."""
        if self._local is None:
            self._local = self._new_engine()
        return self._local

    def _new_engine(self) -> LocalEngine:
        # the client that reserved a turn (the remote engine) decides about turns left by the dead
        return LocalEngine(
            self.spec,
            workdir=self.workdir,
            store=self.store,
            turn_env=self._vertex_env,
            finish_orphans=False,
            pool_after=self.pool_after,
            agent_user=self.agent_user,
            egress_enforced=True,  # the container's or pod's network and the worker's egress proxy
        )

    def _vertex_env(self, spec: AgentSpec, secrets: Mapping[str, str]) -> dict[str, str]:
        """Claude Code's Vertex AI mode for a turn that brings no key of its own (pod settings)."""
        return vertex_env(
            self.env,
            harness=spec.harness,
            secrets=secrets,
            model_base_url=spec.model_base_url,
            spec_env=spec.env,
        )

    # --- turns ------------------------------------------------------------------------------

    async def start_turn(self, request: TurnRequest) -> TurnInfo:
        async with self._start_lock:
            existing = self.turns.get(request.turn_id)
            if existing is not None:
                if existing.run.session_id != request.session_id:
                    raise UsageError(
                        f"turn_id {request.turn_id!r} was already used for another session; "
                        "use a fresh turn_id for every turn"
                    )
                return existing.info()
            if self.closing:
                raise SessionBusyError("this worker is shutting down; start the turn on another sandbox")
            if self.busy and self.current is not None:
                raise SessionBusyError(
                    f"this worker is running turn {self.current.run.turn} of session "
                    f"{self.current.run.session_id}; wait for it (or interrupt it) and start the next one"
                )
            state = await self._begin(request)
            self.turns[request.turn_id] = state
            self.current = state
            state.task = asyncio.get_running_loop().create_task(self._drive(state))
            log.info(
                "turn %s started: session %s turn %d", request.turn_id, request.session_id, state.run.turn
            )
            return state.info()

    async def _begin(self, request: TurnRequest) -> TurnState:
        record = await asyncio.to_thread(self.store.get_session, request.session_id)
        if record is None or record.engine != self.spec.name:
            raise SessionNotFoundError(
                f"no session {request.session_id!r} of engine {self.spec.name!r} in the history store; "
                "write the session record before starting its turn"
            )
        if request.turn is not None and request.turn != record.turns + 1:
            raise SessionBusyError(
                f"session {request.session_id} has {record.turns} finished turns, so the next is "
                f"{record.turns + 1}, not {request.turn}; re-read the session and retry"
            )
        await asyncio.to_thread(self._drop_stale_workspace, record)
        session = await asyncio.to_thread(self._engine().get_session, request.session_id)
        session.refresh(record)  # the store's, as the client reserved it (a held session may be behind)
        turn_config = TurnConfig.from_dict(request.turn_config) if request.turn_config else None
        secrets = dict(request.secrets)
        # checks secrets and config; the reservation in the store (GCS in a pod) off the event loop
        run = await session.start(request.prompt, secrets=secrets, config=turn_config)
        return TurnState(turn_id=request.turn_id, session=session, run=run, secrets=secret_values(secrets))

    def _drop_stale_workspace(self, record: SessionRecord) -> None:
        """A local copy of the session older than the store's (another sandbox ran turns since) is
        removed, so the engine restores workspace and transcript from the latest snapshot."""
        root = self.workdir / "sessions" / record.session_id
        if not root.exists():
            return
        marker = root / _TURN_MARKER
        try:
            local_turns = int(marker.read_text().strip())
        except (OSError, ValueError):
            local_turns = -1
        if local_turns != record.turns and record.snapshot is not None:
            log.info("session %s: local copy is stale, restoring from the snapshot", record.session_id)
            shutil.rmtree(root, ignore_errors=True)

    def _restore_for_exec(self, record: SessionRecord) -> None:
        """``exec`` on a sandbox that has not run this session yet sees the latest workspace."""
        self._drop_stale_workspace(record)
        paths = Workspaces(self.workdir).paths(record.session_id, record.config, self.spec.name)
        snapshot = record.snapshot
        if paths.workspace.exists() or snapshot is None or not snapshot.workspace:
            return
        data = self.store.get_blob(snapshot.workspace)
        if data is None:
            return
        Workspaces.restore(data, paths.workspace)
        paths.setup_marker.write_text("restored\n")
        (paths.root / _TURN_MARKER).write_text(f"{record.turns}\n")

    async def _drive(self, state: TurnState) -> None:
        run = state.run
        flusher = asyncio.get_running_loop().create_task(self._flush_loop(state))
        try:
            result = await run.wait()
            log.info(
                "turn %s finished: %s%s",
                state.turn_id,
                result.stop_reason,
                " (error)" if result.is_error else "",
            )
        except asyncio.CancelledError:
            state.error = "the turn was cancelled by the worker's shutdown"
        except Exception as exc:  # the turn task failed outside the harness (e.g. the store)
            state.error = redact(f"{type(exc).__name__}: {exc}", state.secrets)
            log.error("turn %s failed: %s", state.turn_id, state.error)
        finally:
            flusher.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await flusher
            marker = self.workdir / "sessions" / run.session_id / _TURN_MARKER
            with contextlib.suppress(OSError):
                marker.parent.mkdir(parents=True, exist_ok=True)
                marker.write_text(f"{state.session.record.turns}\n")
            state.finished.set()

    async def _flush_loop(self, state: TurnState) -> None:
        run = state.run
        while not run.done:
            await asyncio.sleep(FLUSH_INTERVAL)
            events = run.events
            end = len(events)
            if events and events[-1].type == "result":
                end -= 1  # the engine writes the result itself, after the turn record
            start = run.flushed
            if end <= start:
                continue
            batch = events[start:end]
            try:
                await asyncio.to_thread(self.store.append_events, run.session_id, run.turn, batch)
            except HarnessRunError as exc:
                log.warning("turn %s: flushing events failed, retrying: %s", state.turn_id, exc)
                continue
            run.flushed = max(run.flushed, end)

    # --- steering -----------------------------------------------------------------------------

    def get(self, turn_id: str) -> TurnState:
        state = self.turns.get(turn_id)
        if state is None:
            raise SessionNotFoundError(
                f"this worker has no turn {turn_id!r}; start it with POST /v1/turns (a restarted "
                "worker forgets its turns: read the history from the store)"
            )
        return state

    async def steer(self, turn_id: str, text: str, message_id: str | None) -> bool:
        state = self.get(turn_id)
        if message_id is not None and message_id in state.steers:
            return state.steers[message_id]
        delivered = await state.run.steer(text, message_id)
        if message_id is not None:
            state.steers[message_id] = delivered
        return delivered

    async def interrupt(self, turn_id: str) -> bool:
        state = self.get(turn_id)
        if state.finished.is_set() or state.run.done:
            return False
        await state.session.interrupt()
        await state.finished.wait()
        return True

    # --- exec -----------------------------------------------------------------------------------

    async def exec(self, request: ExecRequest) -> ExecResponse:
        current = self.current
        if current is not None and current.run.session_id == request.session_id:
            session = current.session
        else:
            record = await asyncio.to_thread(self.store.get_session, request.session_id)
            if record is None or record.engine != self.spec.name:
                raise SessionNotFoundError(
                    f"no session {request.session_id!r} of engine {self.spec.name!r} in the history store"
                )
            await asyncio.to_thread(self._restore_for_exec, record)
            session = self._engine().get_session(request.session_id)
        started = time.monotonic()
        try:
            result = await session.exec(request.command, secrets=request.secrets, timeout=request.timeout)
        except TimeoutError:
            return ExecResponse(
                exit_code=124,
                stdout="",
                stderr=f"the command timed out after {request.timeout:g} s and was stopped",
            )
        log.info(
            "exec in session %s: exit %d in %.2f s",
            request.session_id,
            result.exit_code,
            time.monotonic() - started,
        )
        return ExecResponse(
            exit_code=result.exit_code,
            stdout=result.stdout,
            stderr=result.stderr,
            truncated=bool(getattr(result, "truncated", False)),
        )

    # --- git: on_close ---------------------------------------------------------------------------

    async def deliver(self, request: DeliverRequest) -> DeliverResponse:
        """Commit (and push) the session's work now by its effective ``git`` options (the client
        asks on ``session.aclose()``/``engine.aclose()`` when ``commit`` is ``"on_close"``)."""
        if self.busy and self.current is not None:
            raise SessionBusyError(
                f"this worker is running turn {self.current.run.turn} of session "
                f"{self.current.run.session_id}; deliver after it ends"
            )
        record = await asyncio.to_thread(self.store.get_session, request.session_id)
        if record is None or record.engine != self.spec.name:
            raise SessionNotFoundError(
                f"no session {request.session_id!r} of engine {self.spec.name!r} in the history store"
            )
        await asyncio.to_thread(self._restore_for_exec, record)
        config = SessionConfig.from_dict(record.config) if record.config else None
        turn_config = TurnConfig.from_dict(request.turn_config) if request.turn_config else None
        spec = effective_spec(self.spec, config, turn_config)
        if spec.git is None or not spec.repos or spec.git.commit == "never":
            return DeliverResponse()
        engine = self._engine()
        done = await asyncio.to_thread(engine.deliver_now, request.session_id, spec, dict(request.secrets))
        log.info("deliver in session %s: commit %s", request.session_id, done.commit_sha)
        return DeliverResponse(commit_sha=done.commit_sha, pushed_ref=done.pushed_ref, error=done.error)

    # --- shutdown -------------------------------------------------------------------------------

    async def shutdown(self, grace: float = 30.0) -> None:
        """Refuse new turns, stop the running one (its result is stored), wait for it."""
        self.closing = True
        state = self.current
        if state is not None and not state.finished.is_set():
            log.info("stopping turn %s for shutdown", state.turn_id)
            with contextlib.suppress(Exception):
                await asyncio.wait_for(state.session.interrupt(), grace)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(state.finished.wait(), grace)
        await self.end_warm()

    async def end_warm(self) -> None:
        """End the harness processes the worker's engine keeps (shutdown)."""
        if self._local is not None:
            with contextlib.suppress(Exception):
                await self._local.aclose()
            self._local = None
