"""``ContainerEngine``: local sessions isolated in containers of the compiled image.

The same engine as the Agent Sandbox runtime
(:class:`~harness_run.runtime.worker_client.WorkerEngine`: the worker protocol, turns, re-attach,
exec), with a :class:`ContainerPool` instead of a warm pool.
History is the workdir's SQLite store, shared with the containers through a bind mount.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, cast

from harness_run.compiler import docker_client
from harness_run.errors import InfrastructureError, UsageError
from harness_run.runtime import check_workspace, record_engine
from harness_run.runtime.container._options import ContainerOptions
from harness_run.runtime.container._pool import ContainerPool
from harness_run.runtime.worker_client import WorkerEngine
from harness_run.spec import AgentSpec, WorkspaceOptions
from harness_run.store import EngineRecord, SqliteStore
from harness_run.vocab.k8s import AGENT_UID

__all__ = ["RUNTIME", "ContainerEngine", "deploy_container", "docker_client", "engine_for"]

RUNTIME = "container"


class ContainerEngine(WorkerEngine):
    """An engine whose sessions each run in their own container (``local.deploy(isolation="container")``).

    Closing it removes this process's containers (and closes the workdir's store it opened)."""

    runtime = RUNTIME
    claims: ContainerPool

    def __init__(self, record: EngineRecord, *, store: SqliteStore, claims: ContainerPool) -> None:
        super().__init__(record, store=store, claims=claims, owns_store=True)
        self.workdir = store.root
        claims.mounts_for = self._host_dirs

    def _check_workspace(self, options: WorkspaceOptions) -> WorkspaceOptions:
        """Host directories (bind-mounted) and shared workspaces (in the host workdir) both work here."""
        return check_workspace(options, workdir=self.workdir)

    def _host_dirs(self, session_id: str) -> list[Path]:
        record = self.store.get_session(session_id)
        workspace: object = record.config.get("workspace") if record is not None else None
        host_dir = (
            cast("dict[str, object]", workspace).get("host_dir") if isinstance(workspace, dict) else None
        )
        return [Path(host_dir)] if isinstance(host_dir, str) else []

    def _delete_workspace(self, session_id: str) -> None:
        """The session's containers go, then its folder in the host workdir (there when the worker's
        workspaces live on the host, bind-mounted with the store)."""
        super()._delete_workspace(session_id)
        shutil.rmtree(self.workdir / "sessions" / session_id, ignore_errors=True)

    @property
    def image(self) -> str:
        return self.claims.image

    def __repr__(self) -> str:
        return f"<ContainerEngine {self.name} image={self.image}>"


def share_store(root: Path) -> SqliteStore:
    """The workdir's SQLite store, writable by the containers' worker (uid 1000) as well. As root, the
    store is handed to uid 1000 and stays the owner's only (0700/0600; root reads it anyway). Any
    other uid cannot hand it over, so the database files and blob directories are opened to every
    user (0666/0777): the only mode a bind-mounted uid 1000 can write through without ACLs — run as
    uid 1000 or root, or use process isolation, on a shared machine. The workdir, ``sessions/`` and
    ``shared/`` are searchable by the agent's uid (0711: it reaches its own workspace and home, which
    the worker hands over to it, and lists nothing)."""
    store = SqliteStore(root)
    traversed = [root, *(root / n for n in ("sessions", "shared"))]
    if os.getuid() == AGENT_UID:
        for path in traversed:
            path.mkdir(mode=0o700, parents=True, exist_ok=True)
            path.chmod(0o711)
        return store
    blobs = root / "blobs"
    # the workspaces live there too (the containers' workdir): sessions/, shared/, locks/
    dirs = [
        root,
        blobs,
        *(blobs / f"{i:02x}" for i in range(256)),
        *(root / n for n in ("sessions", "shared", "locks")),
    ]
    files = [root / n for n in ("history.sqlite3", "history.sqlite3-wal", "history.sqlite3-shm")]
    as_root = os.getuid() == 0
    for path in dirs:
        path.mkdir(mode=0o700, parents=True, exist_ok=True)
        if as_root:
            os.chown(path, AGENT_UID, AGENT_UID)
            path.chmod(0o711 if path in traversed else 0o700)
        else:
            path.chmod(0o777)
    for path in (f for f in files if f.exists()):
        if as_root:
            os.chown(path, AGENT_UID, AGENT_UID)
        else:
            path.chmod(0o666)
    return store


def deploy_container(
    spec: AgentSpec,
    *,
    workdir: Path,
    options: ContainerOptions | None = None,
    idle_ttl: float = 60.0,
    claim_timeout: float = 120.0,
    progress: Callable[[str], None] | None = None,
    pool_after: float | None = None,
) -> ContainerEngine:
    """Compile ``spec`` with ``options.image``, build its image unless the tag exists locally,
    record the engine in the workdir's store and return the engine."""
    from harness_run.compiler import PodOptions, build_image, compile

    if not isinstance(spec, AgentSpec):  # pyright: ignore[reportUnnecessaryIsInstance]
        raise UsageError("local.deploy() takes an AgentSpec; load files with AgentSpec.from_yaml(path)")
    options = options if options is not None else ContainerOptions()
    client = docker_client(options.docker_client)
    plan = compile(spec, image=options.build_image, pods=PodOptions(runtime_class=None))
    if not _image_exists(client, plan.image):
        build_image(plan, client=client, progress=progress)
    store = share_store(workdir)
    record = record_engine(store, spec, plan.digest, RUNTIME)
    return engine_for(
        record,
        store,
        client,
        image=plan.image,
        network_mode=options.network_mode,
        idle_ttl=idle_ttl,
        claim_timeout=claim_timeout,
        labels=options.labels,
        pool_after=pool_after,
    )


def engine_for(
    record: EngineRecord,
    store: SqliteStore,
    client: Any,
    *,
    image: str | None = None,
    network_mode: str = "host",
    idle_ttl: float = 60.0,
    claim_timeout: float = 120.0,
    labels: Mapping[str, str] | None = None,
    pool_after: float | None = None,
) -> ContainerEngine:
    """The engine of a recorded container version (its image is ``harness-run/<name>:<short>``)."""
    from harness_run.compiler import SHORT_DIGEST_LEN

    pool = ContainerPool(
        client,
        image=image or f"harness-run/{record.name}:{record.version[:SHORT_DIGEST_LEN]}",
        engine=record.name,
        store_dir=store.root,
        idle_ttl=idle_ttl,
        claim_timeout=claim_timeout,
        network_mode=network_mode,
        labels=labels,
        env={"HARNESS_RUN_POOL_AFTER": repr(float(pool_after))} if pool_after is not None else None,
        network=AgentSpec.from_dict(record.spec).network,
    )
    return ContainerEngine(record, store=store, claims=pool)


def _image_exists(client: Any, image: str) -> bool:
    import docker.errors

    try:
        client.images.get(image)
    except docker.errors.ImageNotFound:
        return False
    except docker.errors.DockerException as exc:
        raise InfrastructureError(
            f"cannot ask the Docker engine about {image}: {exc}", retryable=True
        ) from None
    return True
