"""``HttpEngine``: an :class:`~harness_run.runtime.Engine` whose turns run on a ``harness-run serve``.

Sessions are the library's own :class:`Session` (same checks, same Run: await, iterate, poll,
send, steer, interrupt, exec); this engine is their backend, speaking the server's API. Reads the
Session API makes synchronously (``history()``, ``events()``, ``refresh()``) go through a
read-only :class:`ServerStore`. Blocking calls are made on the caller's thread: serve from another
process (or thread) than the client's event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import urllib.parse
from collections.abc import Coroutine, Mapping, Sequence
from typing import Any, Literal

from harness_run.errors import ApprovalNotFoundError, HarnessRunError, SessionNotFoundError, UsageError
from harness_run.events import AgentEvent, ResultEvent, RunResult, parse_event
from harness_run.runtime._engine import EngineBase
from harness_run.runtime._run import Run
from harness_run.runtime._session import (
    DEFAULT_EXEC_OUTPUT,
    ExecResult,
    Session,
    TurnOutcome,
    TurnPlan,
    with_branch,
)
from harness_run.runtime.http._wire import Wire
from harness_run.spec import AgentSpec, SessionConfig
from harness_run.store import (
    ApprovalRecord,
    EngineRecord,
    HistoryStore,
    SessionRecord,
    SessionUpdate,
    TurnLease,
    TurnRecord,
)
from harness_run.vocab.envrules import PROVIDER_VARIABLES

__all__ = ["HttpEngine", "ServerStore", "connect"]

_DRAIN = 30.0


def connect(base_url: str, api_key: str | None = None, *, engine: str | None = None) -> HttpEngine:
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
    return HttpEngine(wire, chosen[0])


class HttpEngine(EngineBase):
    """One engine of a server (see :func:`connect`)."""

    runtime = "server"

    def __init__(self, wire: Wire, record: EngineRecord) -> None:
        super().__init__(owns_store=True)
        self.wire = wire
        self.record = record
        self.spec = AgentSpec.from_dict(record.spec)
        self.version = record.version
        self.store: HistoryStore = ServerStore(wire)

    @property
    def name(self) -> str:
        return self.record.name

    def __repr__(self) -> str:
        return f"<HttpEngine {self.name} at {self.wire.base_url}>"

    # --- sessions ---------------------------------------------------------------------------------

    def start_session(
        self,
        config: SessionConfig | Mapping[str, Any] | None = None,
        *,
        session_id: str | None = None,
        branch: str | None = None,
        base_branch: str | None = None,
    ) -> Session:
        self._check_open()
        if branch is not None or base_branch is not None:
            config = with_branch(config, branch, base_branch)
        if config is not None and not isinstance(config, SessionConfig):
            config = SessionConfig.from_dict(dict(config))
        body = {"config": config.to_dict() if config else None, "session_id": session_id}
        record = SessionRecord.model_validate(
            self.wire.call("POST", f"/v1/engines/{self.name}/sessions", body)
        )
        session = Session(self, record, config)
        self._sessions[record.session_id] = session
        return session

    def get_session(self, session_id: str) -> Session:
        """Re-attach to a session of this engine on the server; a turn running there (started by any
        client) is followed by ``session.current_run``."""
        self._check_open()
        held = self._sessions.get(session_id)
        if held is not None and held.current_run is not None and not held.current_run.done:
            return held
        record = self.store.get_session(session_id)
        if record is None or record.engine != self.name:
            raise SessionNotFoundError(
                f"no session {session_id!r} of engine {self.name!r} on {self.wire.base_url}; list them "
                "with engine.list_sessions()"
            )
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
        started = self.wire.call("POST", f"/v1/sessions/{session.session_id}/turns", body)
        run.turn = int(started["turn"])
        self._bind(run)
        return self._mirror(session, run)

    def _bind(self, run: Run) -> None:
        path = f"/v1/sessions/{run.session_id}"

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
        async for _, data in self.wire.events(f"/v1/sessions/{run.session_id}/events", after):
            event = parse_event(data)
            if event.turn != run.turn:
                continue
            run.emit(event)
            if isinstance(event, ResultEvent):
                return

    async def _stop(self, run: Run) -> None:
        await self.wire.acall("POST", f"/v1/sessions/{run.session_id}/interrupt")
        if run.result is None:
            await asyncio.wait_for(self._stream(run), _DRAIN)

    async def _record(self, session: Session) -> SessionRecord | None:
        with contextlib.suppress(HarnessRunError):
            return await asyncio.to_thread(self.store.get_session, session.session_id)
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
            "POST", f"/v1/sessions/{session.session_id}/exec", body, timeout=timeout + 30
        )
        return ExecResult(
            exit_code=int(answer["exit_code"]),
            stdout=str(answer["stdout"]),
            stderr=str(answer["stderr"]),
            truncated=bool(answer["truncated"]),
        )


class ServerStore:
    """The history a server keeps, read through its API (a read-only :class:`HistoryStore`)."""

    def __init__(self, wire: Wire) -> None:
        self.wire = wire

    def __repr__(self) -> str:
        return f"ServerStore({self.wire.base_url!r})"

    def _refuse(self) -> UsageError:
        return UsageError("the server keeps its history itself: use the Engine/Session API to change it")

    def put_engine(self, record: EngineRecord) -> None:
        raise self._refuse()

    def get_engine(self, name: str, version: str | None = None) -> EngineRecord | None:
        found = [e for e in self.list_engines(name) if version is None or e.version.startswith(version)]
        return found[-1] if found else None

    def list_engines(self, name: str | None = None) -> list[EngineRecord]:
        path = f"/v1/engines/{name}/versions" if name else "/v1/engines"
        try:
            answer = self.wire.call("GET", path)
        except SessionNotFoundError:
            return []
        return [EngineRecord.model_validate(e) for e in answer["engines"]]

    def delete_engine(self, name: str, version: str) -> None:
        raise self._refuse()

    def put_session(self, record: SessionRecord) -> None:
        raise self._refuse()

    def get_session(self, session_id: str) -> SessionRecord | None:
        try:
            return SessionRecord.model_validate(self.wire.call("GET", f"/v1/sessions/{session_id}"))
        except SessionNotFoundError:
            return None

    def update_session(self, session_id: str, update: SessionUpdate) -> SessionRecord | None:
        raise self._refuse()

    def list_sessions(self, engine: str | None = None) -> list[SessionRecord]:
        answer = self.wire.call("GET", f"/v1/sessions?engine={engine}" if engine else "/v1/sessions")
        return [SessionRecord.model_validate(s) for s in answer["sessions"]]

    def reserve_turn(self, session_id: str, turn: int, holder: str) -> None:
        raise self._refuse()

    def renew_turn(self, session_id: str, turn: int, holder: str) -> None:
        raise self._refuse()

    def get_turn_lease(self, session_id: str, turn: int) -> TurnLease | None:
        return None  # the server reserves and renews the turns it runs

    def put_turn(self, record: TurnRecord) -> None:
        raise self._refuse()

    def list_turns(self, session_id: str) -> list[TurnRecord]:
        answer = self.wire.call("GET", f"/v1/sessions/{session_id}/history")
        return [TurnRecord.model_validate(t) for t in answer["turns"]]

    def append_events(self, session_id: str, turn: int, events: Sequence[AgentEvent]) -> None:
        raise self._refuse()

    def read_events(
        self, session_id: str, turn: int | None = None, *, after_seq: int = -1
    ) -> list[AgentEvent]:
        answer = self.wire.call("GET", f"/v1/sessions/{session_id}/events?format=json")
        events = [parse_event(e) for e in answer["events"]]
        return [e for e in events if (turn is None or e.turn == turn) and e.seq > after_seq]

    def delete_session(self, session_id: str) -> None:
        raise self._refuse()

    # --- approvals: read and decided through the server (it records the deciding key) -------------

    def put_approval(self, record: ApprovalRecord) -> None:
        raise self._refuse()

    def list_approvals(self, session_id: str, *, pending: bool = False) -> list[ApprovalRecord]:
        query = "?turn=all" + ("&pending=1" if pending else "")
        answer = self.wire.call("GET", f"/v1/sessions/{session_id}/approvals{query}")
        return [ApprovalRecord.model_validate(a) for a in answer["approvals"]]

    def get_approval(self, session_id: str, request_id: str) -> ApprovalRecord | None:
        path = f"/v1/sessions/{session_id}/approvals/{urllib.parse.quote(request_id, safe='')}"
        try:
            return ApprovalRecord.model_validate(self.wire.call("GET", path))
        except SessionNotFoundError:
            return None

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
        """``POST /v1/sessions/{id}/approvals/{request_id}``: the server decides as this client's key
        (``key_id`` is the server's to record); only a client decides through a server."""
        if by != "client":
            raise UsageError("through a server only a client decides (its turns time out there)")
        del key_id
        body: dict[str, Any] = {"answer": answer} if answer is not None else {"decision": decision}
        if reason is not None and answer is None:
            body["reason"] = reason
        path = f"/v1/sessions/{session_id}/approvals/{urllib.parse.quote(request_id, safe='')}"
        try:
            return ApprovalRecord.model_validate(self.wire.call("POST", path, body))
        except SessionNotFoundError as exc:
            raise ApprovalNotFoundError(str(exc)) from None

    def put_blob(self, data: bytes) -> str:
        raise self._refuse()

    def delete_blob(self, key: str) -> None:
        raise self._refuse()

    def get_blob(self, key: str) -> bytes | None:
        return None

    def close(self) -> None:
        pass
