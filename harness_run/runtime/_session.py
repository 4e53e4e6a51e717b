"""``Session``: a conversation of turns with one agent, re-attachable from any process."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from harness_run.errors import SessionBusyError, UsageError
from harness_run.events import AgentEvent, RunResult, parse_event
from harness_run.runtime._run import Run
from harness_run.runtime._secrets import resolve_secrets
from harness_run.spec import AgentSpec, SessionConfig, TurnConfig, effective_spec
from harness_run.store import SessionRecord, TurnRecord

if TYPE_CHECKING:
    from harness_run.store import HistoryStore

__all__ = ["ExecResult", "Session", "TurnBackend"]


@dataclass(frozen=True, slots=True)
class ExecResult:
    """The outcome of ``session.exec(command)``."""

    exit_code: int
    stdout: str
    stderr: str


class TurnBackend(Protocol):
    """What a runtime provides to sessions (local processes today, sandboxes next)."""

    spec: AgentSpec
    store: HistoryStore

    def execute_turn(
        self,
        session: Session,
        run: Run,
        spec: AgentSpec,
        secrets: dict[str, str],
        turn_config: TurnConfig | None,
    ) -> Coroutine[Any, Any, RunResult]: ...

    async def execute_command(
        self, session: Session, command: str, secrets: dict[str, str], timeout: float
    ) -> ExecResult: ...


def _as_turn_config(config: TurnConfig | Mapping[str, Any] | None) -> TurnConfig | None:
    if config is None or isinstance(config, TurnConfig):
        return config
    if isinstance(config, SessionConfig):
        raise UsageError("pass a TurnConfig to run()/send(); SessionConfig goes to start_session(config=...)")
    return TurnConfig.from_dict(dict(config))


class Session:
    """One conversation. ``await session.run(prompt)`` runs a turn; ``send`` continues it (or steers
    the running turn); ``interrupt``, ``exec``, ``history`` and ``events`` are available any time."""

    def __init__(self, backend: TurnBackend, record: SessionRecord, config: SessionConfig | None) -> None:
        self._backend = backend
        self.record = record
        self.config = config
        self._current: Run | None = None
        self._pending: set[asyncio.Task[Any]] = set()

    @property
    def session_id(self) -> str:
        return self.record.session_id

    @property
    def harness(self) -> str:
        return self.record.harness

    @property
    def status(self) -> str:
        """``running`` while a turn runs, else ``idle`` (or the last turn's failure: ``failed``)."""
        if self._current is not None and not self._current.done:
            return "running"
        return self.record.status

    @property
    def stop_reason(self) -> str | None:
        return self.record.stop_reason

    @property
    def last_result(self) -> RunResult | None:
        return self.record.last_result

    @property
    def current_run(self) -> Run | None:
        return self._current

    def run(
        self,
        prompt: str,
        *,
        secrets: Mapping[str, str] | None = None,
        config: TurnConfig | Mapping[str, Any] | None = None,
    ) -> Run:
        """Start the next turn and return its :class:`Run` (await it for the result).

        Raises SessionBusyError while a turn runs, SpecError for a bad config, UsageError for
        missing or undeclared secrets — before anything starts.
        """
        if self._current is not None and not self._current.done:
            raise SessionBusyError(
                f"session {self.session_id} is still running turn {self._current.turn}; await it, steer it "
                "with session.send(...), or stop it with session.interrupt()"
            )
        if not isinstance(prompt, str) or not prompt.strip():  # pyright: ignore[reportUnnecessaryIsInstance]
            raise UsageError("the prompt must be a non-empty string")
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            raise UsageError(
                "session.run() needs a running event loop: use `await session.run(...)` in async "
                "code, or harness_run.local.run(spec, prompt) from plain scripts"
            ) from None
        turn_config = _as_turn_config(config)
        spec = effective_spec(self._backend.spec, self.config, turn_config)
        resolved = resolve_secrets(spec, secrets)
        run = Run(self.session_id, self.record.turns + 1, prompt)
        self._current = run
        run.start(self._backend.execute_turn(self, run, spec, resolved, turn_config))
        return run

    def send(
        self,
        prompt: str,
        *,
        secrets: Mapping[str, str] | None = None,
        config: TurnConfig | Mapping[str, Any] | None = None,
    ) -> Run:
        """The next turn — or, while a turn runs, steer it with this message and return that Run."""
        current = self._current
        if current is not None and not current.done:
            if config is not None:
                raise UsageError("a config cannot be applied to a running turn; send it with the next turn")
            task = asyncio.get_running_loop().create_task(current.steer(prompt))
            self._pending.add(task)
            task.add_done_callback(self._pending.discard)
            return current
        return self.run(prompt, secrets=secrets, config=config)

    async def interrupt(self) -> None:
        """Stop the running turn (no-op when idle). Its result has ``stop_reason="interrupted"``."""
        if self._current is not None and not self._current.done:
            await self._current.interrupt()
            await asyncio.gather(asyncio.shield(self._current.wait()), return_exceptions=True)

    async def exec(
        self, command: str, *, secrets: Mapping[str, str] | None = None, timeout: float = 120.0
    ) -> ExecResult:
        """Run a shell command in the session's workspace (also while a turn runs)."""
        resolved = resolve_secrets(self._backend.spec, secrets) if secrets else {}
        return await self._backend.execute_command(self, command, resolved, timeout)

    def history(self) -> list[TurnRecord]:
        """Every finished turn: prompt, effective settings (no secrets), result."""
        return self._backend.store.list_turns(self.session_id)

    def events(self, turn: int | None = None) -> list[AgentEvent]:
        """The stored event log (all turns, or one)."""
        return [parse_event(e) for e in self._backend.store.read_events(self.session_id, turn)]

    def __repr__(self) -> str:
        record = self.record
        return f"<Session {self.session_id} engine={record.engine} turns={record.turns} status={self.status}>"
