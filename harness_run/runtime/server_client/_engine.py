"""``ServerEngine``: an :class:`~harness_run.runtime.Engine` whose turns run on a ``harness-run serve``.

Sessions are the library's own :class:`Session` (same checks, same Run: await, iterate, poll,
send, steer, interrupt, exec, delete); this engine is their backend, speaking the server's API. It
keeps no history of its own: sessions are listed, read (``history()``, ``events()``,
``refresh()``, approvals: :class:`ServerHistory`) and deleted on the server. Blocking calls are
made on the caller's thread: serve from another process (or thread) than the client's event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import Coroutine
from typing import Any

from harness_run.errors import HarnessRunError, SessionBusyError, SessionNotFoundError, UsageError
from harness_run.events import ResultEvent, RunResult, parse_event
from harness_run.runtime._engine import EngineBase
from harness_run.runtime._history import SessionHistory
from harness_run.runtime._run import Run
from harness_run.runtime._session import DEFAULT_EXEC_OUTPUT, ExecResult, Session, TurnOutcome, TurnPlan
from harness_run.runtime.server_client._history import ServerHistory, session_path
from harness_run.runtime.server_client._wire import Wire
from harness_run.spec import AgentSpec, SessionConfig
from harness_run.store import EngineRecord, SessionRecord
from harness_run.vocab.envrules import PROVIDER_VARIABLES

__all__ = ["ServerEngine", "connect"]

_DRAIN = 30.0


def connect(base_url: str, api_key: str | None = None, *, engine: str | None = None) -> ServerEngine:
    """An Engine served by the ``harness-run serve`` at ``base_url``: ``engine`` names which (may be
    left out when the server serves one). ``api_key`` defaults to ``$HARNESS_RUN_API_KEY``."""
    key = api_key or os.environ.get("HARNESS_RUN_API_KEY")
    if not key:
        raise UsageError(
            "connect() needs an API key: api_key=... or HARNESS_RUN_API_KEY (make one with "
            "`harness-run serve keys create --name NAME`)"
        )
    wire = Wire(base_url, key)
    records = [EngineRecord.model_validate(e) for e in wire.call("GET", "/v1/engines")["engines"]]
    names = [r.name for r in records]
    if engine is None and len(records) != 1:
        raise UsageError(f"the server at {wire.base_url} serves {names}: pass engine=<name>")
    chosen = [r for r in records if engine is None or r.name == engine]
    if not chosen:
        raise UsageError(f"the server at {wire.base_url} serves no engine {engine!r}; it serves {names}")
    return ServerEngine(wire, chosen[0])


class ServerEngine(EngineBase):
    """One engine of a server (see :func:`connect`): its sessions are started, listed, read and
    deleted on the server, with this client's key (the sessions that key may see)."""

    runtime = "server"

    def __init__(self, wire: Wire, record: EngineRecord) -> None:
        super().__init__()
        self.wire = wire
        self.record = record
        self.spec = AgentSpec.from_dict(record.spec)
        self.version = record.version
        self._history = ServerHistory(wire)

    @property
    def name(self) -> str:
        return self.record.name

    @property
    def history(self) -> SessionHistory:
        return self._history

    def __repr__(self) -> str:
        return f"<ServerEngine {self.name} at {self.wire.base_url}>"

    # --- sessions ---------------------------------------------------------------------------------

    def _create_session(self, config: SessionConfig | None, session_id: str | None) -> Session:
        """``POST /v1/engines/{name}/sessions``: the server checks the config (and its policy) and
        stores the record, owned by this client's key."""
        body = {"config": config.to_dict() if config else None, "session_id": session_id}
        record = SessionRecord.model_validate(
            self.wire.call("POST", f"/v1/engines/{self.name}/sessions", body)
        )
        return Session(self, record, config)

    def get_session(self, session_id: str) -> Session:
        """Re-attach to a session of this engine on the server; a turn running there (started by any
        client) is followed by ``session.current_run``."""
        self._check_open()
        held = self._sessions.get(session_id)
        if held is not None and held.current_run is not None and not held.current_run.done:
            return held
        record = self._served_session(session_id)
        session = self._adopt(record)
        if record.status == "running":
            try:
                asyncio.get_running_loop()
            except RuntimeError:
                raise UsageError(
                    f"session {session_id} is running a turn; call engine.get_session() inside async code "
                    "to follow it (session.current_run)"
                ) from None
            run = Run(session_id, record.turns + 1, "(re-attached)")
            self._bind(run)
            session.attach(run, self._mirror(session, run))
        return session

    def list_sessions(self) -> list[SessionRecord]:
        """This engine's sessions on the server that this client's key may see, oldest first."""
        self._check_open()
        return self._history.list_sessions(self.name)

    def delete_session(self, session_id: str, *, force: bool = False) -> None:
        """``DELETE /v1/sessions/{id}``: the server deletes the session through its engine (workspace,
        transcript, checkpoints, container or claim, then history); the ``Session`` refuses work after.

        SessionNotFoundError for a session this key may not see (another key's) or of another engine;
        SessionBusyError while a turn of it runs (interrupt it first). ``force`` is refused: the server
        knows whether its own turns run."""
        self._check_open()
        if force:
            raise UsageError(
                "delete_session(force=True) is not available through a server: it knows whether its "
                "own turns run; stop the turn with session.interrupt(), then delete the session"
            )
        self._served_session(session_id)
        try:
            self.wire.call("DELETE", session_path(session_id))
        except SessionNotFoundError:
            raise self._not_found(session_id) from None
        except SessionBusyError:
            raise SessionBusyError(
                f"session {session_id} is running a turn on {self.wire.base_url}; await it or stop it "
                "with session.interrupt(), then delete it"
            ) from None
        self._forget(session_id)

    def _served_session(self, session_id: str) -> SessionRecord:
        """The server's record of one of this engine's sessions, else SessionNotFoundError."""
        record = self._history.get_session(session_id)
        if record is None or record.engine != self.name:
            raise self._not_found(session_id)
        return record

    def _not_found(self, session_id: str) -> SessionNotFoundError:
        return SessionNotFoundError(
            f"no session {session_id!r} of engine {self.name!r} on {self.wire.base_url}; list them "
            "with engine.list_sessions()"
        )

    def versions(self) -> list[EngineRecord]:
        self._check_open()
        answer = self.wire.call("GET", f"/v1/engines/{self.name}/versions")
        return [EngineRecord.model_validate(e) for e in answer["engines"]]

    # --- turns (TurnBackend) ------------------------------------------------------------------------

    def execute_turn(self, session: Session, run: Run, plan: TurnPlan) -> Coroutine[Any, Any, TurnOutcome]:
        # Started synchronously: a busy session or a config the server refuses raises here.
        secrets = {
            name: value
            for name, value in plan.secrets.items()
            if not (name in PROVIDER_VARIABLES and os.environ.get(name) == value)  # the server's own env
        }
        body = {
            "prompt": run.prompt,
            "secrets": secrets,
            "config": plan.config.to_dict() if plan.config else None,
            "message_id": run.message_id,
        }
        started = self.wire.call("POST", f"{session_path(session.session_id)}/turns", body)
        run.turn = int(started["turn"])
        self._bind(run)
        return self._mirror(session, run)

    def _bind(self, run: Run) -> None:
        path = session_path(run.session_id)

        async def interrupt() -> None:
            with contextlib.suppress(HarnessRunError):
                await self.wire.acall("POST", f"{path}/interrupt")

        async def steer(text: str, message_id: str) -> bool:
            answer = await self.wire.acall("POST", f"{path}/steer", {"text": text, "message_id": message_id})
            return bool(answer["delivered"])

        run.bind(interrupt=interrupt, steer=steer)

    async def _mirror(self, session: Session, run: Run) -> TurnOutcome:
        """Mirror the turn's events from the server into ``run`` until its result."""
        try:
            await self._stream(run)
        except asyncio.CancelledError:
            with contextlib.suppress(BaseException):
                await asyncio.shield(self._stop(run))
            cancelled = RunResult(is_error=False, stop_reason="cancelled", error="the turn was cancelled")
            return TurnOutcome(run.result or cancelled, await self._record(session), cancelled=True)
        except HarnessRunError as exc:
            if run.result is None:
                result = RunResult(
                    is_error=True, stop_reason="error", error=str(exc), session_id=run.session_id
                )
                run.emit(ResultEvent(result=result))
        if run.result is None:
            error = f"the server at {self.wire.base_url} ended the event stream before the result"
            run.emit(ResultEvent(result=RunResult(is_error=True, stop_reason="error", error=error)))
        assert run.result is not None
        return TurnOutcome(run.result, await self._record(session))

    async def _stream(self, run: Run) -> None:
        after = f"{run.turn}:{len(run.events) - 1}"
        async for _, data in self.wire.events(f"{session_path(run.session_id)}/events", after):
            event = parse_event(data)
            if event.turn != run.turn:
                continue
            run.emit(event)
            if isinstance(event, ResultEvent):
                return

    async def _stop(self, run: Run) -> None:
        await self.wire.acall("POST", f"{session_path(run.session_id)}/interrupt")
        if run.result is None:
            await asyncio.wait_for(self._stream(run), _DRAIN)

    async def _record(self, session: Session) -> SessionRecord | None:
        with contextlib.suppress(HarnessRunError):
            return await asyncio.to_thread(self._history.get_session, session.session_id)
        return None

    async def execute_command(
        self,
        session: Session,
        command: str,
        secrets: dict[str, str],
        timeout: float,
        *,
        max_output: int = DEFAULT_EXEC_OUTPUT,
    ) -> ExecResult:
        body = {"command": command, "secrets": secrets, "timeout": timeout, "max_output": max_output}
        answer = await self.wire.acall(
            "POST", f"{session_path(session.session_id)}/exec", body, timeout=timeout + 30
        )
        return ExecResult(
            exit_code=int(answer["exit_code"]),
            stdout=str(answer["stdout"]),
            stderr=str(answer["stderr"]),
            truncated=bool(answer["truncated"]),
        )
