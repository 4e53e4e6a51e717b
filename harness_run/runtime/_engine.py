"""``Engine``: the one protocol every runtime implements, and ``EngineBase``, the session
bookkeeping every engine shares (held sessions, open or closed, closing).

``local.deploy``/``local.get_engine`` (:class:`~harness_run.runtime.local.LocalEngine`, or
:class:`~harness_run.runtime.container.ContainerEngine` with ``isolation="container"``),
``sandbox.deploy``/``sandbox.get_engine`` (:class:`~harness_run.runtime.sandbox.SandboxEngine`) and
``harness_run.connect`` (:class:`~harness_run.runtime.server_client.ServerEngine`) all return an
:class:`Engine`. Engines whose sessions live in a history store build on
:class:`~harness_run.runtime._stored.StoredEngine`. Turns themselves are the business of
:class:`Session` and its backend (the engine, as a :class:`~harness_run.runtime._session.TurnBackend`).
"""

from __future__ import annotations

import asyncio
from abc import ABC, abstractmethod
from collections.abc import Coroutine, Mapping
from types import TracebackType
from typing import Any, Protocol, Self, runtime_checkable

from harness_run.errors import UsageError
from harness_run.runtime._history import SessionHistory
from harness_run.runtime._run import Run
from harness_run.runtime._session import (
    DEFAULT_EXEC_OUTPUT,
    ExecResult,
    Session,
    TurnOutcome,
    TurnPlan,
    with_branch,
)
from harness_run.spec import AgentSpec, SessionConfig
from harness_run.store import EngineRecord, SessionRecord

__all__ = ["Engine", "EngineBase"]

STOP_GRACE = 30.0
"""Seconds ``aclose()`` gives an interrupted turn to end (and be stored) before cancelling it."""
KILL_GRACE = 5.0
"""Seconds ``aclose(kill=True)`` gives a killed turn to store its result before cancelling it."""


@runtime_checkable
class Engine(Protocol):
    """One deployed version of an agent, on any runtime.

    The contract, the same on every runtime:

    - ``name`` is the spec's name; ``version`` the version's digest (a hash of the spec and the
      library, or of the compiled image for container and sandbox engines).
    - ``start_session(config=None, *, session_id=None)`` stores a new session record and returns
      its :class:`Session`. ``config`` (a ``SessionConfig`` or a dict of its fields) overlays the
      spec for every turn; a bad config, a harness that is not baked in, or a ``session_id`` that is
      not a UUID or already exists is refused (``SpecError``/``UsageError``) before anything is stored.
    - ``get_session(session_id)`` re-attaches to a stored session, from any process (raises
      ``SessionNotFoundError`` naming ``list_sessions()`` when this engine has none by that id).
    - ``list_sessions()``: this engine's session records (all versions); ``sessions(branch=)``: the
      same, only those working on ``branch`` when it is given; ``versions()``: its
      deployed versions, oldest first. ``delete_session(session_id)`` removes a session's
      workspace, checkpoints and history (refused while a turn runs; on the container and sandbox
      runtimes its containers/sandboxes go first). ``await close_session(session_id)`` ends one
      session in this process: its running turn is stopped, its work committed and pushed when
      ``git.commit`` is ``"on_close"``, its sandbox released; the history stays.
    - ``await aclose()`` stops the turns running in this process's sessions (interrupted; each
      result is stored as usual), releases what the engine holds (sandboxes, containers, the history
      store it opened) and refuses new work (``UsageError``); calling it again does nothing.
      ``close()`` is the same for synchronous code. ``async with engine:`` and ``with engine:``
      close it on exit. Durable history stays: another engine re-attaches to the sessions.
    - ``await aclose(kill=True)`` / ``close(kill=True)`` ends everything now: the containers and
      sandboxes this process holds are deleted first, the running turns' processes are killed
      (SIGKILL, no grace) or their turns cancelled, each result stored as ``interrupted`` or
      ``cancelled``; nothing is committed or pushed (``git.commit="on_close"`` work stays in the
      workspace and its last checkpoint).
    """

    @property
    def name(self) -> str: ...

    @property
    def version(self) -> str: ...

    def start_session(
        self,
        config: SessionConfig | Mapping[str, Any] | None = None,
        *,
        session_id: str | None = None,
        branch: str | None = None,
        base_branch: str | None = None,
    ) -> Session: ...

    def get_session(self, session_id: str) -> Session: ...

    def list_sessions(self) -> list[SessionRecord]: ...

    def sessions(self, branch: str | None = None) -> list[SessionRecord]: ...

    def delete_session(self, session_id: str, *, force: bool = False) -> None: ...

    async def close_session(self, session_id: str) -> None: ...

    def versions(self) -> list[EngineRecord]: ...

    async def aclose(self, *, kill: bool = False) -> None: ...

    def close(self, *, kill: bool = False) -> None: ...

    async def __aenter__(self) -> Self: ...

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None: ...

    def __enter__(self) -> Self: ...

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None: ...


class EngineBase(ABC):
    """The :class:`Engine` members every runtime shares: the sessions this process holds, starting
    and re-attaching them, open or closed, and closing (async first; ``close()`` and the context
    managers wrap it). Nothing here needs a history store.

    A runtime sets ``spec`` and ``version``; implements ``history`` (where its sessions read),
    ``_create_session``, ``get_session``, ``list_sessions``, ``delete_session``, ``versions`` and the
    :class:`~harness_run.runtime._session.TurnBackend` methods (``execute_turn``,
    ``execute_command``); and overrides ``_release``/``_release_now`` when it holds something
    (sandboxes, containers), ``_close_resources`` for what goes last (a store it opened).
    """

    spec: AgentSpec
    version: str

    def __init__(self) -> None:
        self._sessions: dict[str, Session] = {}
        self._closed = False
        self._released = False
        self._closing: asyncio.Task[None] | None = None
        self._killed = False

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def closed(self) -> bool:
        """True once ``aclose()``/``close()`` was called: sessions refuse new turns."""
        return self._closed

    # --- what each runtime implements ----------------------------------------------------------

    @property
    @abstractmethod
    def history(self) -> SessionHistory:
        """Where this engine's sessions read their history and send approval decisions."""

    @abstractmethod
    def _create_session(self, config: SessionConfig | None, session_id: str | None) -> Session:
        """A new session, recorded where this engine keeps its sessions (see ``start_session``)."""

    @abstractmethod
    def get_session(self, session_id: str) -> Session:
        """Re-attach to a stored session (see :class:`Engine`)."""

    @abstractmethod
    def list_sessions(self) -> list[SessionRecord]:
        """This engine's session records (every version's), oldest first."""

    @abstractmethod
    def delete_session(self, session_id: str, *, force: bool = False) -> None:
        """Remove the session's workspace, checkpoints and history (see :class:`Engine`)."""

    @abstractmethod
    def versions(self) -> list[EngineRecord]:
        """This engine's deployed versions, oldest first."""

    @abstractmethod
    def execute_turn(self, session: Session, run: Run, plan: TurnPlan) -> Coroutine[Any, Any, TurnOutcome]:
        """A turn's coroutine (see :class:`~harness_run.runtime._session.TurnBackend`)."""

    @abstractmethod
    async def execute_command(
        self,
        session: Session,
        command: str,
        secrets: dict[str, str],
        timeout: float,
        *,
        max_output: int = DEFAULT_EXEC_OUTPUT,
    ) -> ExecResult:
        """Run ``command`` in the session's workspace (see ``Session.exec``)."""

    # --- sessions -------------------------------------------------------------------------------

    def start_session(
        self,
        config: SessionConfig | Mapping[str, Any] | None = None,
        *,
        session_id: str | None = None,
        branch: str | None = None,
        base_branch: str | None = None,
    ) -> Session:
        """A new session; its record is kept now (any process can re-attach to it).
        ``config`` overlays the spec for every turn of this session. ``branch``/``base_branch`` are
        ``SessionConfig.branch``/``base_branch``: the branch of the spec's first repo the session
        works on, created from ``base_branch`` when the remote does not have it."""
        self._check_open()
        if branch is not None or base_branch is not None:
            config = with_branch(config, branch, base_branch)
        if config is not None and not isinstance(config, SessionConfig):
            config = SessionConfig.from_dict(dict(config))
        session = self._create_session(config, session_id)
        self._sessions[session.session_id] = session
        return session

    def sessions(self, branch: str | None = None) -> list[SessionRecord]:
        """This engine's sessions (every version's), oldest first; with ``branch``, only those
        working on that branch (``SessionConfig.branch``)."""
        records = self.list_sessions()
        return records if branch is None else [r for r in records if r.branch == branch]

    async def close_session(self, session_id: str) -> None:
        """End the session in this process (``session.aclose()``): stop its running turn (stored as
        interrupted), commit and push its work when ``git.commit`` is ``"on_close"``, release its
        sandbox or container. The history stays (``get_session`` re-attaches); the ``Session``
        object refuses work after. RunError when committing or pushing failed — what was committed
        stays in the workspace and its checkpoint."""
        self._check_open()
        held = self._sessions.pop(session_id, None)
        try:
            if held is not None and held.current_run is not None and not held.current_run.done:
                await held.current_run.stop(STOP_GRACE)
            await self._close_session(session_id)
        finally:
            if held is not None:
                held.refresh(self.history.get_session(session_id))  # the commit and ref delivered
                held.mark_closed()

    async def _close_session(self, session_id: str) -> None:  # noqa: B027 (an optional hook)
        """What the runtime does when one session ends here (deliver on_close work, release)."""

    def _adopt(self, record: SessionRecord) -> Session:
        """The session of ``record``: the one this process holds (brought up to date with the
        record), else a new one."""
        session = self._sessions.get(record.session_id)
        if session is not None:
            session.refresh(record)
            return session
        config = SessionConfig.from_dict(record.config) if record.config else None
        session = Session(self, record, config)
        self._sessions[record.session_id] = session
        return session

    def _forget(self, session_id: str) -> None:
        """The session was deleted: its ``Session`` (if held here) refuses work from now on."""
        held = self._sessions.pop(session_id, None)
        if held is not None:
            held.mark_deleted()

    def _check_open(self) -> None:
        if self._closed:
            raise UsageError(
                f"engine {self.name!r} is closed; get it again (local.get_engine / sandbox.get_engine) "
                "and re-attach to sessions with engine.get_session(session_id)"
            )

    # --- closing ------------------------------------------------------------------------------

    async def aclose(self, *, kill: bool = False) -> None:
        """Stop this process's running turns (interrupted, results stored), release what the engine
        holds and refuse new work. Waits until done; calling it again does nothing more.

        ``kill=True`` ends everything now instead: the containers/sandboxes this process holds are
        deleted first, the running turns are killed (SIGKILL, no grace) or cancelled, their results
        stored; no ``on_close`` commit or push. It also works on an engine already closing."""
        self._closed = True
        loop = asyncio.get_running_loop()
        if self._closing is None:
            self._closing = loop.create_task(self._shutdown(kill))
        elif kill and not self._killed:  # a plain close is winding down: end everything now
            self._killed = True
            await self._kill_all()
        if self._closing.done() or self._closing.get_loop() is loop:
            await asyncio.shield(self._closing)

    def close(self, *, kill: bool = False) -> None:
        """``aclose()`` for synchronous code (``kill``: as ``aclose(kill=True)``).

        Inside a running event loop (a plain ``with`` block in async code) with turns still running,
        it cannot wait for them: it starts ``aclose()`` on that loop and returns at once (``await
        engine.aclose()`` to wait for it). Otherwise it releases everything before it returns.
        """
        self._closed = True
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            loop = None
        if loop is not None and self._running_turns():
            if self._closing is None:
                self._closing = loop.create_task(self._shutdown(kill))
                self._closing.add_done_callback(_retrieve)
            return
        if kill:  # no turn runs here: dropping on_close work leaves the blocking release below
            self._killed = True
            self._drop_pending()
        if not self._released:
            self._released = True
            self._release_now()
            self._close_resources()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def _running_turns(self) -> bool:
        return any(s.current_run is not None and not s.current_run.done for s in self._sessions.values())

    async def _kill_all(self) -> None:
        """``aclose(kill=True)``: the runtime's holdings go first, then every running turn."""
        await self._kill()
        runs = [s.current_run for s in list(self._sessions.values())]
        live = [run for run in runs if run is not None and not run.done]
        await asyncio.gather(*(run.kill(KILL_GRACE) for run in live), return_exceptions=True)

    async def _kill(self) -> None:
        """Drop ``on_close`` work and give up what the runtime holds now (``aclose(kill=True)``)."""
        self._drop_pending()

    def _drop_pending(self) -> None:  # noqa: B027 (an optional hook)
        """Forget the sessions' ``on_close`` work (killed: nothing is committed or pushed)."""

    async def _shutdown(self, kill: bool = False) -> None:
        if kill and not self._killed:
            self._killed = True
            await self._kill_all()
        runs = [s.current_run for s in list(self._sessions.values())]
        live = [run for run in runs if run is not None and not run.done]
        await asyncio.gather(*(run.stop(STOP_GRACE) for run in live), return_exceptions=True)
        if not self._released:
            self._released = True
            try:
                await self._release()
            finally:
                self._close_resources()

    async def _release(self) -> None:  # noqa: B027 (an optional hook, not an abstract method)
        """Give up what this engine holds (``aclose``); nothing by default."""

    def _release_now(self) -> None:  # noqa: B027 (an optional hook)
        """The same, blocking (``close`` from synchronous code: no turn can be running then)."""

    def _close_resources(self) -> None:  # noqa: B027 (an optional hook)
        """What goes last when the engine is released (a store it opened); nothing by default."""


def _retrieve(task: asyncio.Task[None]) -> None:
    """Mark a background close's failure as seen (``aclose()`` re-raises it to whoever waits)."""
    if not task.cancelled():
        task.exception()
