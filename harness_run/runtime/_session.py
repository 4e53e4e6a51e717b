"""``Session``: a conversation of turns with one agent, re-attachable from any process."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Coroutine, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from harness_run.errors import SessionBusyError, UsageError
from harness_run.events import AgentEvent, RunResult
from harness_run.harness import get_driver
from harness_run.runtime._run import Run
from harness_run.runtime._tracing import end_turn_span, start_turn_span
from harness_run.runtime._transcript import Transcript
from harness_run.security import check_secrets, resolve_secrets
from harness_run.spec import AgentSpec, SessionConfig, TurnConfig, check_prompt, effective_spec
from harness_run.store import ApprovalRecord, SessionRecord, TurnRecord
from harness_run.telemetry import NOOP, Span

if TYPE_CHECKING:
    from harness_run.runtime._history import SessionHistory
    from harness_run.store import HistoryStore

__all__ = [
    "DEFAULT_EXEC_OUTPUT",
    "ExecResult",
    "Session",
    "TurnBackend",
    "TurnOutcome",
    "TurnPlan",
    "create_session",
    "with_branch",
]


DEFAULT_EXEC_OUTPUT = 1024 * 1024
"""``session.exec()`` keeps at most this many bytes of each stream by default (1 MiB)."""

_STEER_REFUSAL = {
    "codex": "Codex reads one prompt per turn and takes no message while a turn runs",
    "opencode": "OpenCode reads one prompt per turn and takes no message while a turn runs",
}


@dataclass(frozen=True, slots=True)
class ExecResult:
    """The outcome of ``session.exec(command)``: exit code 124 when it timed out (as ``timeout(1)``);
    ``truncated`` when a stream was longer than the cap and was cut."""

    exit_code: int
    stdout: str
    stderr: str
    truncated: bool = False


@dataclass(frozen=True, slots=True)
class TurnPlan:
    """One turn as its session has checked it, handed to the backend: computed once per turn."""

    spec: AgentSpec
    """The effective spec: the engine's spec with the session's and the turn's config applied."""
    secrets: dict[str, str]
    """The run's secrets, checked against ``spec`` (plus provider variables from the environment)."""
    config: TurnConfig | None
    """The turn's overlay as given (its turn record keeps it)."""


@dataclass(frozen=True, slots=True)
class TurnOutcome:
    """What a backend's turn gives back to its session, which applies it."""

    result: RunResult
    record: SessionRecord | None
    """The session's record after the turn, as stored (None: it could not be read back; the session
    keeps the one it has)."""
    cancelled: bool = False
    """The turn's task was cancelled: the session takes the record, then lets the cancellation go on."""


class TurnBackend(Protocol):
    """What a runtime's engine provides to its sessions: turns, commands, their history.

    A turn's coroutine runs it to the end and returns a :class:`TurnOutcome`; it never changes the
    session (the session applies the outcome). When its task is cancelled it ends the turn (a
    ``cancelled`` result, stored) and returns the outcome with ``cancelled=True`` instead of raising.
    """

    spec: AgentSpec

    @property
    def history(self) -> SessionHistory:
        """Where the session reads its record, turns and events, and sends approval decisions."""
        ...

    @property
    def closed(self) -> bool:
        """True once the engine is closed: its sessions refuse new turns and commands."""
        ...

    def delete_session(self, session_id: str, *, force: bool = False) -> None:
        """Remove the session's workspace, checkpoints and history (see ``Engine.delete_session``)."""
        ...

    async def close_session(self, session_id: str) -> None:
        """End the session in this process (see ``Engine.close_session``)."""
        ...

    def execute_turn(self, session: Session, run: Run, plan: TurnPlan) -> Coroutine[Any, Any, TurnOutcome]:
        """The turn's coroutine; may raise synchronously to refuse the turn (e.g. SessionBusyError
        when another client holds it), before anything starts."""
        ...

    async def execute_command(
        self,
        session: Session,
        command: str,
        secrets: dict[str, str],
        timeout: float,
        *,
        max_output: int = DEFAULT_EXEC_OUTPUT,
    ) -> ExecResult:
        """Run ``command``; on timeout kill it and return exit code 124 (never raise for that)."""
        ...


def _as_turn_config(config: TurnConfig | Mapping[str, Any] | None) -> TurnConfig | None:
    if config is None or isinstance(config, TurnConfig):
        return config
    if isinstance(config, SessionConfig):
        raise UsageError("pass a TurnConfig to run()/send(); SessionConfig goes to start_session(config=...)")
    return TurnConfig.from_dict(dict(config))


class Session:
    """One conversation. ``await session.run(prompt)`` runs a turn; ``send`` continues it (or steers
    the running turn); ``interrupt``, ``exec``, ``history`` and ``events`` are available any time.

    The session owns its state: its record changes only by the outcome of its own turns, or when it
    is re-read from the history store (``refresh``)."""

    def __init__(
        self,
        backend: TurnBackend,
        record: SessionRecord,
        config: SessionConfig | None,
        *,
        spec: AgentSpec | None = None,
    ) -> None:
        self._backend = backend
        self._record = record
        self.config = config
        self._spec = spec
        self._current: Run | None = None
        self._starting: Run | None = None  # a turn being started by start() (its reservation)
        self._pending: set[asyncio.Task[Any]] = set()
        self._deleted = False
        self._closed_here = False
        self._messages: dict[str, Run] = {}
        """Message ids seen by this process (prompts and steers) -> their turn: a retried message
        returns that turn instead of being delivered again."""

    @property
    def session_id(self) -> str:
        return self._record.session_id

    @property
    def record(self) -> SessionRecord:
        """The session's record (turns, status, last result, snapshot) as this process knows it."""
        return self._record

    @property
    def spec(self) -> AgentSpec:
        """The spec this session runs: the engine's spec with the session's config applied (each
        turn applies its own config on top)."""
        if self._spec is None:
            self._spec = effective_spec(self._backend.spec, self.config)
        return self._spec

    @property
    def harness(self) -> str:
        return self._record.harness

    @property
    def status(self) -> str:
        """``running`` while a turn runs (until its outcome is applied), else ``idle`` (or the last
        turn's failure: ``failed``)."""
        if self._current is not None and (not self._current.done or self._current.settling):
            return "running"
        return self._record.status

    @property
    def stop_reason(self) -> str | None:
        return self._record.stop_reason

    @property
    def last_result(self) -> RunResult | None:
        return self._record.last_result

    @property
    def current_run(self) -> Run | None:
        return self._current

    def run(
        self,
        prompt: str,
        *,
        secrets: Mapping[str, str] | None = None,
        config: TurnConfig | Mapping[str, Any] | None = None,
        message_id: str | None = None,
    ) -> Run:
        """Start the next turn and return its :class:`Run` (await it for the result).

        ``message_id`` identifies the prompt (its ``user`` event carries it; default: a new id);
        an id this session already took returns that turn's Run, nothing is started again.

        Raises SessionBusyError while a turn runs, SpecError for a bad config, UsageError for
        missing or undeclared secrets, or once the engine is closed — before anything starts.
        """
        prepared = self._prepare(prompt, secrets, config, message_id)
        if isinstance(prepared, Run):
            return prepared
        run, plan, span = prepared
        try:  # the backend may refuse synchronously: nothing is set then
            with span.current():  # a remote backend's start request carries the turn's trace context
                body = self._backend.execute_turn(self, run, plan)
        except BaseException as exc:
            self._refused(exc, span)
            raise
        return self._launch(run, body, span)

    async def start(
        self,
        prompt: str,
        *,
        secrets: Mapping[str, str] | None = None,
        config: TurnConfig | Mapping[str, Any] | None = None,
        message_id: str | None = None,
    ) -> Run:
        """:meth:`run`, with the engine's blocking start (the turn's reservation in the store, a dead
        turn finished first, a remote start request) in a worker thread: for a server, whose event
        loop must not wait on the store. The same checks and errors as :meth:`run`."""
        prepared = self._prepare(prompt, secrets, config, message_id)
        if isinstance(prepared, Run):
            return prepared
        run, plan, span = prepared
        self._starting = run  # another run()/start() of this session is refused meanwhile
        try:
            with span.current():
                body = await asyncio.to_thread(self._backend.execute_turn, self, run, plan)
        except BaseException as exc:
            self._refused(exc, span)
            raise
        finally:
            self._starting = None
        return self._launch(run, body, span)

    def _prepare(
        self,
        prompt: str,
        secrets: Mapping[str, str] | None,
        config: TurnConfig | Mapping[str, Any] | None,
        message_id: str | None,
    ) -> Run | tuple[Run, TurnPlan, Span]:
        """The checks before a turn starts, then its Run, plan and span (or the Run that already
        took ``message_id``)."""
        if message_id is not None and message_id in self._messages:
            return self._messages[message_id]
        self._check_open()
        if self._current is not None and not self._current.done:
            raise SessionBusyError(
                f"session {self.session_id} is still running turn {self._current.turn}; await it, steer it "
                "with session.send(...), or stop it with session.interrupt()"
            )
        if self._current is not None and self._current.settling:
            raise SessionBusyError(
                f"session {self.session_id} is still storing turn {self._current.turn} (its result "
                "is out); `await` that run, or iterate it to the end, then send this as the next turn"
            )
        if self._starting is not None:
            raise SessionBusyError(
                f"session {self.session_id} is starting turn {self._starting.turn}; await it, or stop "
                "it with session.interrupt() once it runs"
            )
        check_prompt(prompt)  # non-empty, no NUL (UsageError)
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            raise UsageError(
                "session.run() needs a running event loop: use `await session.run(...)` in async "
                "code, or harness_run.local.run(spec, prompt) from plain scripts"
            ) from None
        turn_config = _as_turn_config(config)
        spec = effective_spec(self._backend.spec, self.config, turn_config)  # once per turn
        get_driver(spec.harness).check(spec)  # what the harness cannot honour is refused, not ignored
        plan = TurnPlan(spec=spec, secrets=resolve_secrets(spec, secrets), config=turn_config)
        run = Run(self.session_id, self._record.turns + 1, prompt, message_id)
        span = start_turn_span(self._record.engine, self.session_id, run.turn, spec.harness, spec.model)
        return run, plan, span

    def _refused(self, exc: BaseException, span: Span) -> None:
        span.fail(type(exc).__name__)
        span.end()
        if isinstance(exc, SessionBusyError):
            self.refresh()  # another client holds the turn: show where the session stands

    def _launch(self, run: Run, body: Coroutine[Any, Any, TurnOutcome], span: Span) -> Run:
        self._current = run
        self._messages[run.message_id] = run
        run.approver = self
        run.start(self._drive(body, span))
        return run

    def attach(self, run: Run, body: Coroutine[Any, Any, TurnOutcome]) -> None:
        """Make ``run``, driven by ``body``, this session's running turn (runtimes use it to follow a
        turn another process started; applications never need it)."""
        self._current = run
        run.approver = self
        run.start(self._drive(body))

    async def _drive(self, body: Coroutine[Any, Any, TurnOutcome], span: Span = NOOP) -> RunResult:
        outcome: TurnOutcome | None = None
        try:
            with span.current():
                outcome = await body
        finally:
            run = self._current
            end_turn_span(span, outcome.result if outcome else None, run.turn if run is not None else 0)
        if outcome.record is not None:
            self._record = outcome.record
        if outcome.cancelled:
            raise asyncio.CancelledError
        return outcome.result

    def refresh(self, record: SessionRecord | None = None) -> None:
        """Re-read the session's record from the history store (another client may have run turns
        since), or take ``record`` when it was just read. No-op while a turn runs here."""
        if self._current is not None and (not self._current.done or self._current.settling):
            return
        if record is None:
            self._check_open()
            record = self._backend.history.get_session(self.session_id)
        if record is not None and record.session_id == self.session_id:
            self._record = record

    def delete(self, *, force: bool = False) -> None:
        """Remove this session's workspace, checkpoints and history (``engine.delete_session``);
        refused while a turn runs. The session refuses everything afterwards."""
        self._check_open()
        self._backend.delete_session(self.session_id, force=force)

    async def aclose(self) -> None:
        """End this session here (``engine.close_session``): stop its running turn, commit and push
        its work when ``git.commit`` is ``"on_close"``, release its sandbox or container. Its
        history stays (``engine.get_session(id)`` re-attaches); this object refuses work after."""
        self._check_open()
        await self._backend.close_session(self.session_id)

    def mark_deleted(self) -> None:
        """Refuse all work from now on (its engine deleted the session)."""
        self._deleted = True

    def mark_closed(self) -> None:
        """Refuse all work from now on (the session was closed in this process)."""
        self._closed_here = True

    def _check_open(self) -> None:
        if self._deleted:
            raise UsageError(
                f"session {self.session_id} was deleted; start a new one with engine.start_session()"
            )
        if self._closed_here:
            raise UsageError(
                f"session {self.session_id} was closed; re-attach with "
                f"engine.get_session({self.session_id!r}) to continue it"
            )
        if self._backend.closed:
            raise UsageError(
                f"the engine of session {self.session_id} is closed; get the engine again "
                "(local.get_engine / sandbox.get_engine) and re-attach with "
                f"engine.get_session({self.session_id!r})"
            )

    def send(
        self,
        prompt: str,
        *,
        secrets: Mapping[str, str] | None = None,
        config: TurnConfig | Mapping[str, Any] | None = None,
        message_id: str | None = None,
    ) -> Run:
        """The next turn — or, while a turn runs, steer it with this message and return that Run.

        A steer is delivered into the running turn (one ``user`` event with ``message_id``); the
        same ``message_id`` again is delivered once. Harnesses that cannot take a message mid-turn
        (Codex, OpenCode) raise UsageError instead: interrupt the turn, then send.
        """
        current = self._current
        if message_id is not None and message_id in self._messages:
            return self._messages[message_id]  # delivered before (a retry): not again
        if current is not None and not current.done:
            if current.followed:
                raise SessionBusyError(
                    f"session {self.session_id} is running turn {current.turn}, started by another "
                    "process (its worker goes on without it); `await session.current_run` follows it to "
                    "its result, then send this as the next turn"
                )
            if config is not None:
                raise UsageError("a config cannot be applied to a running turn; send it with the next turn")
            check_prompt(prompt, "message")
            refusal = _STEER_REFUSAL.get(self.harness)
            if refusal is not None:
                raise UsageError(
                    f"{refusal}: session {self.session_id} is running turn {current.turn}. Wait for it "
                    "(`await run`) and send this as the next turn, or stop it with "
                    "`await session.interrupt()` and then `session.send(...)` (the conversation resumes)"
                )
            message_id = message_id or uuid.uuid4().hex
            self._messages[message_id] = current
            task = asyncio.get_running_loop().create_task(current.steer(prompt, message_id))
            self._pending.add(task)
            task.add_done_callback(self._pending.discard)
            task.add_done_callback(lambda t, mid=message_id: self._forget_undelivered(t, mid))
            return current
        return self.run(prompt, secrets=secrets, config=config, message_id=message_id)

    def _forget_undelivered(self, task: asyncio.Task[bool], message_id: str) -> None:
        if task.cancelled() or task.exception() is not None or not task.result():
            self._messages.pop(message_id, None)  # never delivered: the id may be sent again

    async def interrupt(self) -> None:
        """Stop the running turn (no-op when idle). Its result has ``stop_reason="interrupted"``."""
        if self._current is not None and not self._current.done:
            await self._current.interrupt()
            await asyncio.gather(asyncio.shield(self._current.wait()), return_exceptions=True)

    async def exec(
        self,
        command: str,
        *,
        secrets: Mapping[str, str] | None = None,
        timeout: float = 120.0,
        max_output: int = DEFAULT_EXEC_OUTPUT,
    ) -> ExecResult:
        """Run a shell command in the session's workspace, during or between turns.

        It sees the agent's environment plus the ``secrets`` given here (declared names only; no
        model keys from this process's environment). After ``timeout`` seconds it is killed and the
        result has exit code 124; each stream keeps at most ``max_output`` bytes (``truncated``).
        """
        if not isinstance(command, str) or not command.strip():  # pyright: ignore[reportUnnecessaryIsInstance]
            raise UsageError("exec() needs a non-empty shell command string")
        if timeout <= 0 or max_output < 0:
            raise UsageError("exec() needs timeout > 0 and max_output >= 0")
        self._check_open()
        resolved = check_secrets(self._backend.spec, secrets) if secrets else {}
        return await self._backend.execute_command(self, command, resolved, timeout, max_output=max_output)

    def history(self) -> list[TurnRecord]:
        """Every finished turn: prompt, effective settings (no secrets), result."""
        self._check_open()
        return self._backend.history.list_turns(self.session_id)

    def pending_approvals(self) -> list[ApprovalRecord]:
        """The tool calls (and questions) of this session waiting for a person now, oldest first,
        from the store (any process's turn). Requests left by a turn whose process died are settled
        as denied here (reason "the turn's process ended") and not listed."""
        self._check_open()
        return self._backend.history.pending_approvals(self.session_id)

    async def approve(self, request_id: str, *, key_id: str | None = None) -> ApprovalRecord:
        """Let the waiting tool call ``request_id`` run (from any process re-attached to the
        session). The first decision wins; a decided or expired request raises UsageError, an
        unknown id ``ApprovalNotFoundError``."""
        self._check_open()
        return await self._backend.history.decide(
            self.session_id, request_id, decision="allow", key_id=key_id
        )

    async def deny(
        self, request_id: str, reason: str | None = None, *, key_id: str | None = None
    ) -> ApprovalRecord:
        """Refuse the waiting tool call ``request_id``: it does not run, and the model gets
        ``reason`` as the tool's error (then goes on)."""
        self._check_open()
        return await self._backend.history.decide(
            self.session_id, request_id, decision="deny", reason=reason, key_id=key_id
        )

    async def answer(self, request_id: str, text: str, *, key_id: str | None = None) -> ApprovalRecord:
        """Answer the agent's question ``request_id`` (a ``question`` event); the model reads
        "The user answered: <text>" as the question tool's result."""
        self._check_open()
        if not isinstance(text, str) or not text.strip():  # pyright: ignore[reportUnnecessaryIsInstance]
            raise UsageError("answer() needs a non-empty text")
        return await self._backend.history.decide(self.session_id, request_id, answer=text, key_id=key_id)

    def events(self, turn: int | None = None) -> list[AgentEvent]:
        """The stored event log (all turns, or one)."""
        self._check_open()
        return self._backend.history.read_events(self.session_id, turn)

    def transcript(self) -> Transcript:
        """The conversation: a portable rendering of the stored events (``to_markdown()``,
        ``to_json()``) and the harness's native session files from the latest checkpoint."""
        self._check_open()
        self.refresh()
        return self._backend.history.transcript(self._record)

    def __repr__(self) -> str:
        record = self._record
        return f"<Session {self.session_id} engine={record.engine} turns={record.turns} status={self.status}>"


def create_session(
    backend: TurnBackend,
    store: HistoryStore,
    engine: str,
    version: str,
    config: SessionConfig | Mapping[str, Any] | None,
    session_id: str | None,
) -> Session:
    """A new session of ``backend``: the overlay and the id are checked (a harness that is not
    baked in, or a setting it cannot honour, is refused here), its record is stored in ``store``,
    then returned."""
    if config is not None and not isinstance(config, SessionConfig):
        config = SessionConfig.from_dict(dict(config))
    spec = effective_spec(backend.spec, config)
    get_driver(spec.harness).check(spec)
    if config is not None and config.branch is not None and not spec.repos:
        raise UsageError(
            f"branch={config.branch!r} needs a repository: add one to the spec's repos "
            "(RepoSource.git(url, auth=SECRET_NAME)) or start the session without a branch"
        )
    sid = session_id or str(uuid.uuid4())
    try:
        uuid.UUID(sid)
    except ValueError:
        raise UsageError(f"session_id {sid!r} must be a UUID (harnesses use it as their own id)") from None
    if store.get_session(sid) is not None:
        raise UsageError(f"session {sid} already exists; re-attach with engine.get_session({sid!r})")
    now = time.time()
    record = SessionRecord(
        session_id=sid,
        engine=engine,
        version=version,
        harness=spec.harness,
        created_at=now,
        updated_at=now,
        config=config.to_dict() if config else {},
    )
    store.put_session(record)
    return Session(backend, record, config, spec=spec)


def with_branch(
    config: SessionConfig | Mapping[str, Any] | None, branch: str | None, base_branch: str | None
) -> SessionConfig:
    """``config`` with ``start_session(branch=, base_branch=)`` folded in (checked as config fields)."""
    data = config.to_dict() if isinstance(config, SessionConfig) else dict(config or {})
    data.update({k: v for k, v in (("branch", branch), ("base_branch", base_branch)) if v is not None})
    return SessionConfig.from_dict(data)
