"""``StoredEngine``: an engine whose sessions live in a :class:`~harness_run.store.HistoryStore` it
reads and writes itself (:class:`~harness_run.runtime.local.LocalEngine` and
:class:`~harness_run.runtime.worker_client.WorkerEngine`, hence the container, sandbox, E2B and Daytona
engines): session records in the store, sessions listed and deleted through it, versions recorded
in it (:func:`record_engine`)."""

from __future__ import annotations

import time

from harness_run.errors import SessionBusyError, SessionNotFoundError, UsageError
from harness_run.runtime._cleanup import purge_session
from harness_run.runtime._engine import EngineBase
from harness_run.runtime._history import SessionHistory, StoreHistory
from harness_run.runtime._session import Session, create_session
from harness_run.runtime._workspace import check_workspace
from harness_run.spec import AgentSpec, SessionConfig, WorkspaceOptions
from harness_run.store import EngineRecord, EngineRuntime, HistoryStore, SessionRecord

__all__ = ["StoredEngine", "record_engine"]


class StoredEngine(EngineBase):
    """The :class:`~harness_run.runtime._engine.EngineBase` of runtimes that keep their sessions in
    a history store: a new session's record is stored at once, ``list_sessions``/``get_session``
    read the store (any process re-attaches), ``delete_session`` removes the session's workspace and
    then its history from the store. The store is closed with the engine when ``owns_store``.

    A runtime sets ``store`` besides ``spec`` and ``version``, implements ``get_session`` (with
    ``_stored_session`` and ``_adopt``) and ``versions``, and overrides ``_delete_workspace`` when
    it can remove a session's workspace, ``_check_workspace`` when its sessions run on this machine.
    """

    store: HistoryStore

    def __init__(self, *, owns_store: bool) -> None:
        super().__init__()
        self._owns_store = owns_store

    @property
    def history(self) -> SessionHistory:
        return StoreHistory(self.store)

    # --- sessions -------------------------------------------------------------------------------

    def _create_session(self, config: SessionConfig | None, session_id: str | None) -> Session:
        """A new session; its record goes to the store now (any process can re-attach to it)."""
        return create_session(
            self, self.store, self.name, self.version, self._with_workspace(config), session_id
        )

    def _with_workspace(self, config: SessionConfig | None) -> SessionConfig | None:
        """``config`` with its ``workspace`` checked by the runtime."""
        if config is None or config.workspace is None:
            return config
        checked = self._check_workspace(config.workspace)
        if checked == config.workspace:
            return config
        return SessionConfig.from_dict({**config.to_dict(), "workspace": checked.to_dict()})

    def _check_workspace(self, options: WorkspaceOptions) -> WorkspaceOptions:
        """The session's workspace options as this runtime runs them (host directories resolved), or
        a UsageError naming the field it cannot honour. By default (runtimes whose sessions run on
        other machines) a host directory is refused; runtimes on this machine override it."""
        if options.host_dir is not None:
            runtime = str(getattr(self, "runtime", type(self).__name__))
            raise UsageError(
                f"workspace.host_dir ({options.host_dir!r}) is not available on the {runtime} runtime: "
                "its sessions run on other machines, which cannot see this one's directories; use "
                "local.deploy() (in place, or isolation='container': bind-mounted), or put the code in "
                "a git repository and list it in the spec's repos"
            )
        return check_workspace(options, workdir=None)

    def list_sessions(self) -> list[SessionRecord]:
        """This engine's sessions in the history store (every version's), oldest first."""
        self._check_open()
        return self.store.list_sessions(self.name)

    def delete_session(self, session_id: str, *, force: bool = False) -> None:
        """Remove the session's workspace, checkpoints and history; its ``Session`` refuses work after.

        Refused (SessionBusyError) while a turn of it runs in this process, or while its stored
        status is ``running`` (another process may be running it; ``force=True`` when that process
        is known to be gone). Runtimes that cannot remove a session's workspace refuse (UsageError).
        """
        record = self._stored_session(session_id, "in the store")
        held = self._sessions.get(session_id)
        if (held is not None and held.status == "running") or (record.status == "running" and not force):
            raise SessionBusyError(
                f"session {session_id} is running a turn; await it or stop it with session.interrupt(), "
                "then delete it (force=True when the process that ran it is gone)"
            )
        self._delete_workspace(session_id)
        purge_session(self.store, record)
        self._forget(session_id)

    def _delete_workspace(self, session_id: str) -> None:
        """Remove what the runtime keeps for the session besides its history (before the history)."""
        raise UsageError(
            f"deleting sessions is not available on this runtime yet (session {session_id} is kept); "
            "delete local sessions with a local engine"
        )

    def _stored_session(self, session_id: str, where: str) -> SessionRecord:
        """The stored record of one of this engine's sessions, else SessionNotFoundError."""
        self._check_open()
        record = self.store.get_session(session_id)
        if record is None or record.engine != self.name:
            raise SessionNotFoundError(
                f"no session {session_id!r} of engine {self.name!r} {where}; list them with "
                "engine.list_sessions()"
            )
        return record

    # --- closing ------------------------------------------------------------------------------

    def _close_resources(self) -> None:
        self._close_store()

    def _close_store(self) -> None:
        if self._owns_store:
            self.store.close()


def record_engine(store: HistoryStore, spec: AgentSpec, version: str, runtime: EngineRuntime) -> EngineRecord:
    """Store ``spec`` as engine ``version`` on ``runtime``; a redeploy of the same version keeps the
    date it was first deployed. Returns the record (blocking: the store is written)."""
    existing = store.get_engine(spec.name, version)
    record = EngineRecord(
        name=spec.name,
        version=version,
        spec=spec.to_dict(),
        runtime=runtime,
        created_at=existing.created_at if existing is not None else time.time(),
    )
    store.put_engine(record)
    return record
