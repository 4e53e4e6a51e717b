"""The local engine's workspace steps: preparing a session's workspace (restored from its
checkpoint, taken over from an idle session of the same (remote, branch), or made), the harness's
native session files, the checkpoint after a turn, and delivering the work by git (after the turn,
or when the session closes)."""

from __future__ import annotations

import asyncio
import io
import shutil
import tarfile
from collections.abc import Callable, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from harness_run.errors import RunError, StoreError, redact
from harness_run.events import AgentEvent, RunResult, SetupEvent
from harness_run.harness import HarnessDriver, TurnContext
from harness_run.runtime.local._git import AgentGit, Delivery, deliver
from harness_run.runtime.local._pool import pool_key, refresh_repo, take_idle_workspace
from harness_run.runtime.local._workspace import SessionPaths, Workspaces
from harness_run.security import agent_env, secret_forms, secret_values
from harness_run.spec import AgentSpec, GitOptions, GitRepo
from harness_run.store import HistoryStore, SessionRecord, SnapshotRef

__all__ = ["WorkspaceSteps"]


class WorkspaceSteps:
    """Mixed into :class:`~harness_run.runtime.local.LocalEngine`."""

    spec: AgentSpec
    store: HistoryStore
    workdir: Path
    pool_after: float
    _workspaces: Workspaces
    _on_close: dict[str, tuple[AgentSpec, dict[str, str]]]
    """Sessions to commit (and push) on close: their last turn's spec and secrets, in memory."""
    _paths: Callable[[str, Mapping[str, Any] | None], SessionPaths]

    async def _ensure_workspace(
        self,
        record: SessionRecord,
        spec: AgentSpec,
        paths: SessionPaths,
        secrets: dict[str, str],
        emit: Callable[[AgentEvent], None],
        driver: HarnessDriver,
    ) -> None:
        snap = record.snapshot
        if not paths.workspace.exists() and not paths.own_workspace and not paths.host_dir:
            snap = await asyncio.to_thread(self._newest_shared_snapshot, record, paths) or snap
        if not paths.workspace.exists() and snap is not None and snap.workspace:
            emit(SetupEvent(step="restoring the workspace from the checkpoint"))
            data = self._snapshot(snap.workspace, "workspace", record.session_id)
            await asyncio.to_thread(Workspaces.restore, data, paths.workspace)
            paths.setup_marker.parent.mkdir(parents=True, exist_ok=True)
            paths.setup_marker.write_text("restored\n")
        branch = record.config.get("branch")
        if not paths.workspace.exists() and paths.own_workspace and spec.repos:
            await self._take_idle(record, spec, paths, secrets, emit)
        env = agent_env(spec, secrets, home=str(paths.home), path_prefix=[])
        await self._workspaces.prepare(
            spec,
            paths,
            env,
            secrets,
            lambda _s, d: emit(SetupEvent(step=d)),
            driver.skills_dir(paths.workspace, paths.home),
            (branch, record.config.get("base_branch")) if branch else None,
        )
        if paths.own_workspace and spec.repos:  # lendable to a later session of this (remote, branch)
            paths.pool_key.write_text(pool_key(self.spec.name, spec, branch, record.owner) + "\n")

    def _newest_shared_snapshot(self, record: SessionRecord, paths: SessionPaths) -> SnapshotRef | None:
        """A shared workspace that is gone (its sandbox went, or it was pruned) comes back as the
        newest checkpoint any session sharing it took (by the end of the turn that took it) — not
        this session's own, which may predate the others' turns."""
        newest: tuple[float, SnapshotRef] | None = None
        for other in self.store.list_sessions(self.spec.name):
            snap = other.snapshot
            if snap is None or not snap.workspace:
                continue
            if (
                self._workspaces.paths(other.session_id, other.config, self.spec.name).workspace
                != paths.workspace
            ):
                continue
            took = next((t for t in self.store.list_turns(other.session_id) if t.turn == snap.turn), None)
            ended = took.started_at + (took.result.duration_s if took.result else 0.0) if took else 0.0
            if newest is None or ended > newest[0]:
                newest = (ended, snap)
        return newest[1] if newest is not None else None

    async def _take_idle(
        self,
        record: SessionRecord,
        spec: AgentSpec,
        paths: SessionPaths,
        secrets: dict[str, str],
        emit: Callable[[AgentEvent], None],
    ) -> None:
        """Branch pooling: take over an idle workspace of the same (remote, branch) instead of
        cloning, and bring its repos to the remote's state (see ``runtime/local/_pool.py``)."""
        config = record.config
        branch = config.get("branch")
        key = pool_key(self.spec.name, spec, branch, record.owner)
        donor = await asyncio.to_thread(
            take_idle_workspace,
            self.workdir,
            key,
            paths,
            spec,
            secrets,
            self.store.get_session,
            self.pool_after,
            lambda donor: self._agent_git(self._workspaces.paths(donor)),
        )
        if donor is None:
            return
        pair = (branch, config.get("base_branch")) if isinstance(branch, str) else None
        # the donor's agent's checkout is this session's agent's now
        agent = await asyncio.to_thread(self._agent_git, paths, paths.workspace)
        try:
            heads = [
                await asyncio.to_thread(
                    refresh_repo, paths.workspace / r.dir_name, r, secrets, pair if i == 0 else None, agent
                )
                for i, r in enumerate(spec.repos)
            ]
        except RunError as exc:
            await asyncio.to_thread(shutil.rmtree, paths.workspace, True)
            emit(
                SetupEvent(
                    step=f"the idle workspace of session {donor} could not be refreshed ({exc}); cloning"
                )
            )
            return
        repo = spec.repos[0]
        emit(
            SetupEvent(
                step=f"reusing the idle workspace of session {donor} for {repo.url} "
                f"{branch or repo.ref or '(default branch)'} at {heads[0][:12]}: no clone"
            )
        )

    def _agent_git(self, paths: SessionPaths, *hand_over: Path) -> AgentGit | None:
        """Who this process's git runs as in the session's checkouts: its agent, when it has a uid
        of its own (``_git.AgentGit``), after ``hand_over`` (a checkout restored or cloned since its
        last turn) is made its; else None (this process)."""
        user = self._workspaces.user_for(paths)
        if user is None:
            return None
        user.hand_over(*hand_over)
        return AgentGit(user, paths.home)

    def _deliver(
        self,
        paths: SessionPaths,
        repo: GitRepo,
        options: GitOptions,
        message: str,
        branch: str | None,
        secrets: Mapping[str, str],
        forms: list[str],
    ) -> Delivery:
        """:func:`~harness_run.runtime.local._git.deliver` in the session's checkout of ``repo``: as
        its agent when it has a uid of its own (a checkout restored or cloned since its last turn is
        handed over first), never as this process in the agent's repo; blocking."""
        target = paths.workspace / repo.dir_name
        agent = self._agent_git(paths, target, paths.home)
        return deliver(
            target, repo, options, message=message, branch=branch, secrets=secrets, forms=forms, agent=agent
        )

    async def _restore_native(self, record: SessionRecord, driver: HarnessDriver, ctx: TurnContext) -> None:
        snap = record.snapshot
        if not record.native_started or driver.native_files(ctx) or snap is None or not snap.native:
            return
        data = self._snapshot(snap.native, "conversation", record.session_id)
        await asyncio.to_thread(Workspaces.restore, data, driver.native_root(ctx))

    def _snapshot(self, key: str, what: str, session_id: str) -> bytes:
        data = self.store.get_blob(key)
        if data is None:
            raise StoreError(
                f"the {what} snapshot {key} of session {session_id} is missing from the store "
                f"{self.store!r} (its blob file was deleted); restore the store's blobs from a backup, "
                "or start a new session"
            )
        return data

    def _checkpoint(
        self,
        ctx: TurnContext,
        native_root: Path,
        native: list[Path],
        values: list[str],
        turn: int,
        workspace: bool = True,
    ) -> SnapshotRef:
        """The turn's snapshot blobs; ``workspace=False`` (a host directory: it stays where it is, and
        may be large) keeps only the native session files."""
        # as redact(): values and their JSON-escaped forms (transcripts are JSON), none under 4 chars
        values = secret_forms(values)
        workspace_key = self.store.put_blob(Workspaces.snapshot(ctx.workspace, values)) if workspace else None
        native_key = None
        if native:
            buf = io.BytesIO()
            with tarfile.open(fileobj=buf, mode="w:gz", compresslevel=1) as tar:
                for path in native:
                    data = path.read_bytes()
                    for value in values:
                        data = data.replace(value.encode(), b"***")
                    info = tarfile.TarInfo(path.relative_to(native_root).as_posix())
                    info.size = len(data)
                    tar.addfile(info, io.BytesIO(data))
            native_key = self.store.put_blob(buf.getvalue())
        return SnapshotRef(workspace=workspace_key, native=native_key, turn=turn)

    async def _after_turn_git(
        self, record: SessionRecord, spec: AgentSpec, secrets: dict[str, str], result: RunResult, turn: int
    ) -> RunResult:
        """``after_turn``: the work committed (and pushed) into ``result`` — a failure is the turn's
        error, the commit stays in the workspace; ``on_close``: remembered for the engine's close."""
        if spec.git is None or not spec.repos or spec.git.commit == "never":
            return result
        if spec.git.commit == "on_close":
            self._on_close[record.session_id] = (spec, secrets)
            return result
        sid = record.session_id
        done = await asyncio.to_thread(self._commit_work, sid, record.config, spec, secrets, turn)
        update: dict[str, Any] = {"commit_sha": done.commit_sha, "pushed_ref": done.pushed_ref}
        if done.error is not None:
            error = f"{result.error}; {done.error}" if result.error else done.error
            update.update(is_error=True, stop_reason="error", error=error)
        return result.model_copy(update=update)

    def _commit_work(
        self,
        session_id: str,
        config: Mapping[str, Any],
        spec: AgentSpec,
        secrets: Mapping[str, str],
        turn: int,
    ) -> Delivery:
        """Commit (and push) the session's work in its repo — the spec's first; blocking."""
        assert spec.git is not None
        repo, branch = spec.repos[0], config.get("branch")
        forms = secret_forms(secret_values(secrets))
        message = spec.git.render_message(
            engine=self.spec.name, session_id=session_id, turn=turn, branch=branch or ""
        )
        paths = self._paths(session_id, config)
        done = self._deliver(paths, repo, spec.git, message, branch, secrets, forms)
        return done if done.error is None else replace(done, error=redact(done.error, forms))

    def deliver_now(self, session_id: str, spec: AgentSpec, secrets: Mapping[str, str]) -> Delivery:
        """Commit (and push) the session's work now by ``spec.git`` (``on_close``; the worker's
        ``/v1/deliver``) and keep the outcome on its record; blocking. Nothing without a workspace."""
        record = self.store.get_session(session_id)
        if record is None or not self._paths(session_id, record.config).workspace.exists():
            return Delivery()
        done = self._commit_work(session_id, record.config, spec, secrets, record.turns)
        update = {"commit_sha": done.commit_sha or record.commit_sha, "pushed_ref": done.pushed_ref}
        self.store.put_session(record.model_copy(update=update))
        return done

    def _close_deliveries(self, only: str | None = None) -> None:
        """``git.commit="on_close"``: commit (and push) the work of the sessions whose turns ran in
        this process (or just ``only``), with their last turn's secrets (held in memory only);
        RunError when any failed."""
        if only is None:
            pending, self._on_close = self._on_close, {}
        else:
            held = self._on_close.pop(only, None)
            pending = {only: held} if held is not None else {}
        errors = [
            f"session {sid}: {done.error}"
            for sid, (spec, secrets) in pending.items()
            if (done := self.deliver_now(sid, spec, secrets)).error is not None
        ]
        if errors:
            raise RunError("committing the sessions' work on close failed: " + "; ".join(errors))
