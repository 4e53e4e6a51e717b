"""What a server holds: the store, one engine per served name, and turn-start notices for streams.

Engines are the library's own (:class:`~harness_run.runtime.local.LocalEngine` over the server's
store, the container runtime's, :class:`~harness_run.runtime.sandbox.SandboxEngine` on the cluster
of :class:`~harness_run.server._sandbox.SandboxAccess`), so a turn through the server is the same
code as a turn in process. A session is looked up
in the store, so sessions made by another process, or before a restart, are served too.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncGenerator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness_run import telemetry
from harness_run.errors import HarnessRunError, SessionNotFoundError, UsageError
from harness_run.events import AgentEvent, DeltaEvent, ResultEvent
from harness_run.runtime import AgentUser, Engine, Run, Session
from harness_run.runtime.local import DEFAULT_IDLE_TTL, AgentUids, LocalEngine
from harness_run.server._cloudrun import refuse_local_engines_on_cloud_run
from harness_run.server._follow import POLL, Stamp, Watches, stored_after
from harness_run.server._policy import ServerPolicy
from harness_run.server._sandbox import FLAGS, SandboxAccess
from harness_run.spec import AgentSpec
from harness_run.store import EngineRecord, HistoryStore, SessionRecord, SqliteStore

__all__ = ["ServerState", "WarmOptions"]

log = logging.getLogger("harness_run.server")


AGENT_NICE = 10
"""How far below the server's CPU priority its local engines' agents run: a burst of CLI start-ups
(each ~0.5 CPU-second) must not starve the event loop that answers every other request."""


@dataclass(frozen=True, slots=True)
class WarmOptions:
    """Warm harness processes of the served local engines (``serve --warm-pool``, ``--idle-ttl``)."""

    warm_pool: int = 0
    idle_ttl: float = DEFAULT_IDLE_TTL


class ServerState:
    """The engines served from ``store``: every local engine recorded there, every container engine
    (``local.deploy(isolation="container")``) when ``store`` is a workdir's SQLite store and a Docker
    engine answers (``docker_client``, default ``DOCKER_HOST``), every sandbox engine
    (``sandbox.deploy``) when ``sandbox`` names the project and location of their cluster, plus
    ``specs``. A cluster that ``sandbox`` names but the kubeconfig cannot reach raises
    :class:`UsageError`."""

    def __init__(
        self,
        store: HistoryStore,
        workdir: Path,
        specs: list[AgentSpec],
        *,
        docker_client: Any = None,
        sandbox: SandboxAccess | None = None,
        agent_user: AgentUser | AgentUids | None = None,
        policy: ServerPolicy | None = None,
        warm: WarmOptions | None = None,
    ) -> None:
        self._warm = warm if warm is not None else WarmOptions()
        """Local engines' warm harness processes (``serve --warm-pool``, ``--idle-ttl``)."""
        self.policy = policy if policy is not None else ServerPolicy()
        """What callers may change (``serve --policy``): checked before a session or turn starts."""
        self._agent_user = agent_user  # local engines' agents: that uid, or one uid per session
        self.store = store
        self.workdir = workdir
        self._docker = docker_client
        self._sandbox = sandbox if sandbox is not None else SandboxAccess()
        self._sandbox.check()
        self._kube: Any = None
        self.skipped: dict[str, str] = {}
        """Engines recorded in the store but not served, and why (start-up log, the no-engine error)."""
        chosen = {record.name: record for record in store.list_engines()}  # the newest of each name
        given = {spec.name: spec for spec in specs}
        refused = refuse_local_engines_on_cloud_run(  # no agent inside a Cloud Run service (issue 22)
            {**{n: r.runtime for n, r in chosen.items()}, **dict.fromkeys(given, "local")}
        )
        for name, why in refused.items():
            self.skipped[name] = why
            log.warning("not serving %s", why)
        chosen = {n: r for n, r in chosen.items() if n not in refused}
        given = {n: spec for n, spec in given.items() if n not in refused}
        self.engines: dict[str, Engine] = {}
        for name, record in chosen.items():
            if name in given:
                continue
            engine = self._recorded(record)
            if engine is not None:
                self.engines[name] = engine
        for name, spec in given.items():
            self.engines[name] = self._local(spec)
        self.watches = Watches(store)
        """What wakes the sessions' event streams (:meth:`events`)."""
        self._runs: dict[str, Run] = {}  # the turn each session last started here
        telemetry.add("harness_run.server.engines", len(self.engines))

    def _local(self, spec: AgentSpec) -> Engine:
        return LocalEngine(
            spec,
            workdir=self.workdir,
            store=self.store,
            agent_user=self._agent_user,
            idle_ttl=self._warm.idle_ttl,
            warm_pool=self._warm.warm_pool,
            agent_nice=AGENT_NICE,
        )

    def _recorded(self, record: EngineRecord) -> Engine | None:
        if record.runtime == "local":
            return self._local(AgentSpec.from_dict(record.spec))
        if record.runtime == "container" and isinstance(self.store, SqliteStore):
            from harness_run.runtime.container import docker_client, engine_for, share_store

            try:
                client = docker_client(self._docker)
            except HarnessRunError as exc:
                log.warning("not serving container engine %s: %s", record.name, exc)
                return None
            return engine_for(record, share_store(self.store.root), client)
        if record.runtime == "sandbox":
            return self._sandbox_engine(record)
        log.info("not serving engine %s (runtime %s) yet", record.name, record.runtime)
        return None

    def _sandbox_engine(self, record: EngineRecord) -> Engine | None:
        from harness_run.runtime.sandbox import ClaimOptions, SandboxEngine

        access = self._sandbox
        if not access.given:
            self.skipped[record.name] = f"a sandbox engine: pass {FLAGS} to serve it"
            log.warning("not serving sandbox engine %s: pass %s to serve it", record.name, FLAGS)
            return None
        if self._kube is None:
            self._kube = access.kube()
            log.info("sandbox engines claim on %s (namespace %s)", self._kube.server, self._kube.namespace)
        claims = ClaimOptions(router_url=access.router_url)
        return SandboxEngine(record, store=self.store, kube=self._kube, options=claims)

    def engine(self, name: str | None) -> Engine:
        """The engine served as ``name`` (None: the only one), else SessionNotFoundError (404)."""
        if name is None:
            if len(self.engines) == 1:
                return next(iter(self.engines.values()))
            raise UsageError(f"name the engine: this server serves {sorted(self.engines)}")
        engine = self.engines.get(name)
        if engine is None:
            raise SessionNotFoundError(
                f"no engine {name!r} here; GET /v1/engines lists {sorted(self.engines)}"
            )
        return engine

    def session(self, session_id: str) -> Session:
        """The session by id (any served engine's), else SessionNotFoundError (404)."""
        record = self.store.get_session(session_id)
        if record is None or record.engine not in self.engines:
            raise SessionNotFoundError(f"no session {session_id!r} here; GET /v1/sessions lists them")
        session = self.engines[record.engine].get_session(session_id)
        session.refresh(record)  # another server on the same store may have run turns (no-op mid-turn)
        return session

    def live_record(self, session: Session) -> SessionRecord:
        """The session's record with its live status (``running`` while a turn runs here)."""
        record = session.record
        return (
            record.model_copy(update={"status": session.status})
            if session.status != record.status
            else record
        )

    def listed(self, record: SessionRecord) -> SessionRecord:
        """A stored record as listed: ``running`` while a turn started here runs (the store keeps
        the status of the last finished turn)."""
        run = self._runs.get(record.session_id)
        if run is None or run.done or record.status == "running":
            return record
        return record.model_copy(update={"status": "running"})

    def started(self, session: Session, run: Run) -> None:
        """Tell the session's streams a turn began; keep the turn's failure from going unseen."""
        sid = session.session_id
        self._runs[sid] = run
        run_task = asyncio.ensure_future(run.wait())
        run_task.add_done_callback(lambda t: t.cancelled() or t.exception())
        run_task.add_done_callback(lambda _: self._runs.pop(sid) if self._runs.get(sid) is run else None)
        engine, harness = session.record.engine, session.harness
        telemetry.add("harness_run.server.active_sessions", 1, engine=engine)
        run_task.add_done_callback(lambda _: _turn_metrics(run, engine, harness))
        self.watches.wake(sid)

    async def close(self) -> None:
        self.watches.close()
        for engine in self.engines.values():
            await engine.aclose()

    # --- a session's event stream, with replay -------------------------------------------------

    async def events(
        self, session: Session, after: tuple[int, int], *, until_result: bool = False
    ) -> AsyncGenerator[AgentEvent | None]:
        """The session's events after the ``(turn, seq)`` cursor: stored ones, then live ones as they
        come, in order, each once; None when nothing came for :data:`POLL` seconds (a keep-alive).
        The running turn's text deltas come with its live events (``Run.follow``); the store has none.
        ``until_result``: end after the first result event.

        The store is read from the cursor once, then again only when the session's stored record or
        next-turn lease changed (a turn of another process; see :mod:`~harness_run.server._follow`);
        a turn started here wakes the stream at once and is followed in memory."""
        with self.watches.follow(session.session_id) as watch:
            cursor = after
            seen = -1  # the watch version the last store read covered: read at once
            while True:
                run = session.current_run
                live_turn = run.turn if run is not None and _ahead(run, cursor) else None
                if seen != watch.version:
                    seen = watch.version
                    last = live_turn - 1 if live_turn is not None else _last_turn(session, watch.stamp)
                    sid = session.session_id
                    for event in await asyncio.to_thread(stored_after, self.store, sid, cursor, last):
                        cursor = (event.turn, event.seq)
                        yield event
                        if until_result and isinstance(event, ResultEvent):
                            return
                if run is not None and live_turn is not None:
                    async for event in run.follow(cursor[1] if cursor[0] == run.turn else -1):
                        if isinstance(event, DeltaEvent):  # live only: no cursor, never replayed
                            yield event
                            continue
                        if (event.turn, event.seq) > cursor:
                            cursor = (event.turn, event.seq)
                            if isinstance(event, ResultEvent):  # served once the session has applied it
                                await asyncio.wait({asyncio.ensure_future(_settled(run))})
                            yield event
                            if until_result and isinstance(event, ResultEvent):
                                return
                    continue
                if not await watch.wait(POLL):
                    yield None


def _turn_metrics(run: Run, engine: str, harness: str) -> None:
    """Count the ended turn (by engine, harness, outcome), its duration and a failure."""
    result = run.result
    outcome = "cancelled" if result is None else result.stop_reason
    telemetry.add("harness_run.server.active_sessions", -1, engine=engine)
    telemetry.add("harness_run.server.turns", 1, engine=engine, harness=harness, outcome=outcome)
    duration = time.time() - run.started_at
    telemetry.record("harness_run.server.turn.duration", duration, engine=engine, harness=harness)
    if result is None or result.is_error:
        telemetry.add("harness_run.server.errors", 1, engine=engine, harness=harness, outcome=outcome)


async def _settled(run: Run) -> None:
    """Wait until ``run``'s session has applied its outcome (whatever the turn's end)."""
    with contextlib.suppress(BaseException):
        await asyncio.shield(run.wait())


def _last_turn(session: Session, stamp: Stamp | None) -> int:
    """The last turn with stored events there may be: the record's (or the store's, if newer), and
    the next one, which another process may be running."""
    return max(session.record.turns, stamp[0] if stamp is not None else 0) + 1


def _ahead(run: Run, cursor: tuple[int, int]) -> bool:
    """Whether ``run`` has events past ``cursor`` (or will have: it is still running)."""
    if run.turn > cursor[0]:
        return True
    return run.turn == cursor[0] and (not run.done or len(run.events) - 1 > cursor[1])
