"""Run agents on this machine: ``local.deploy(spec).start_session().run(prompt)``.

``deploy`` prepares nothing heavy up front; workspaces, repos, skills and package venvs are made on
a session's first turn and reused. History (and, with ``checkpoint=True``, snapshots) goes to an
SQLite store under the workdir (``$HARNESS_RUN_HOME``, default ``~/.local/share/harness-run``).

``deploy(spec, isolation="container")`` runs each session in its own container of the compiled
image instead (the same image and worker protocol as the Agent Sandbox runtime; needs Docker); its
options come in one object, ``container=ContainerOptions(image=ImageOptions(...), network_mode=...,
labels=..., docker_client=...)``, with the same :class:`ImageOptions` as ``sandbox.deploy``.
"""

from __future__ import annotations

import asyncio
import warnings
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal, TypedDict, Unpack

from harness_run.compiler import ImageOptions
from harness_run.errors import UsageError
from harness_run.events import RunResult
from harness_run.runtime import Engine
from harness_run.runtime.container import ContainerOptions
from harness_run.runtime.local import (
    DEFAULT_IDLE_TTL,
    DEFAULT_MAX_IDLE,
    DEFAULT_POOL_AFTER,
    LocalEngine,
    default_workdir,
    resolve_workdir,
)
from harness_run.spec import AgentSpec, SessionConfig, TurnConfig
from harness_run.store import SqliteStore
from harness_run.vocab.pins import DEFAULT_BASE_IMAGE

__all__ = ["ContainerOptions", "Engine", "ImageOptions", "LocalEngine", "deploy", "get_engine", "run"]

_ISOLATIONS = ("process", "container")


class _ContainerKeywords(TypedDict, total=False):
    """``local.deploy``'s container keywords before :class:`ContainerOptions` (deprecated)."""

    base_image: str | None
    docker_client: Any
    network_mode: str
    ca_files: Sequence[str | Path]
    labels: Mapping[str, str] | None


def deploy(
    spec: AgentSpec,
    *,
    workdir: str | Path | None = None,
    claude_binary: str | None = None,
    codex_binary: str | None = None,
    opencode_binary: str | None = None,
    isolation: Literal["process", "container"] = "process",
    container: ContainerOptions | None = None,
    idle_ttl: float | None = None,
    progress: Callable[[str], None] | None = None,
    pool_after: float = DEFAULT_POOL_AFTER,
    max_idle_processes: int = DEFAULT_MAX_IDLE,
    warm_pool: int = 0,
    **deprecated: Unpack[_ContainerKeywords],
) -> Engine:
    """An :class:`~harness_run.Engine` for ``spec`` on this machine (close it with ``async with``,
    ``with``, ``await engine.aclose()`` or ``engine.close()``).

    ``isolation="process"`` (default): each turn is a harness CLI subprocess in a per-session
    workspace under ``workdir`` (``claude_binary``/``codex_binary``/``opencode_binary`` override the
    CLIs). ``isolation="container"``: ``spec`` is compiled into an image (built on the Docker engine
    unless that tag exists locally; ``progress`` gets the build's output lines) and each session
    runs in its own container of it, through the in-image worker as on Agent Sandbox; containers
    are removed after ``idle_ttl`` seconds without a turn. ``container``:
    :class:`ContainerOptions` (the image's :class:`ImageOptions`, the network mode, labels, the
    Docker client). History goes to the workdir's store either way.

    ``spec.network``: ``"none"`` or an allow-list is enforced by containers (no network; the model
    and the listed hosts through an egress proxy on this machine) and refused by
    ``isolation="process"`` with a :class:`~harness_run.UsageError` (it cannot be enforced there).

    Warm harness processes (``isolation="process"``; docs/warm-processes.md): after a turn, the
    session's harness process is kept ``idle_ttl`` seconds (default 30; 0: a process per turn) and
    takes the session's next turn; at most ``max_idle_processes`` are kept (the least recently used
    go first). ``warm_pool=N`` keeps N processes started for sessions to come: a session started
    without an id or config takes one (``await engine.fill_pool()`` starts them and waits). Every
    harness keeps its process (Codex and OpenCode through a bridge to their server modes); no secret
    value is ever in a kept process. For containers,
    ``idle_ttl`` (default 60) is how long an idle session's container stays.

    ``pool_after``: a new session on a (remote, branch) takes over the workspace
    of an earlier session on it, instead of cloning, once that one has been idle this many seconds
    (and nothing in it would be lost); see docs/workspaces.md.

    Deprecated: ``base_image=``, ``ca_files=``, ``network_mode=``, ``labels=`` and
    ``docker_client=`` still work (with a ``DeprecationWarning``) until the release after 0.1.0;
    they are ``container=ContainerOptions(...)``'s fields now.
    """
    if isolation not in _ISOLATIONS:
        raise UsageError(f"isolation must be one of {list(_ISOLATIONS)}, not {isolation!r}")
    if container is not None and isolation != "container":
        raise UsageError(
            "local.deploy(container=ContainerOptions(...)) is for isolation='container'; "
            "add isolation='container', or leave container= out to run processes on this host"
        )
    if deprecated:
        container = _container_of(deprecated, container, isolation)
    if isolation == "container":
        from harness_run.runtime.container import deploy_container

        return deploy_container(
            spec,
            workdir=resolve_workdir(workdir if workdir is not None else default_workdir()),
            options=container,
            idle_ttl=60.0 if idle_ttl is None else idle_ttl,
            progress=progress,
            pool_after=pool_after,
        )
    return LocalEngine(
        spec,
        workdir=workdir,
        claude_binary=claude_binary,
        codex_binary=codex_binary,
        opencode_binary=opencode_binary,
        pool_after=pool_after,
        idle_ttl=DEFAULT_IDLE_TTL if idle_ttl is None else idle_ttl,
        max_idle_processes=max_idle_processes,
        warm_pool=warm_pool,
    )


def _container_of(
    keywords: _ContainerKeywords, container: ContainerOptions | None, isolation: str
) -> ContainerOptions | None:
    """The :class:`ContainerOptions` of ``local.deploy``'s deprecated container keywords (warns)."""
    unknown = sorted(set(keywords) - set(_ContainerKeywords.__annotations__))
    if unknown:
        raise TypeError(f"deploy() got an unexpected keyword argument {unknown[0]!r}")
    names = sorted(keywords)
    in_image = [n for n in ("base_image", "ca_files") if n in keywords]
    outside = [n for n in ("network_mode", "labels", "docker_client") if n in keywords]
    replacement = ", ".join(
        ([f"image=ImageOptions({', '.join(f'{n}=...' for n in in_image)})"] if in_image else [])
        + [f"{n}=..." for n in outside]
    )
    given = ", ".join(f"{n}=" for n in names)
    if container is not None:
        raise UsageError(
            f"local.deploy() got both container=ContainerOptions(...) and {given}; move "
            f"{', '.join(names)} into it: container=ContainerOptions({replacement})"
        )
    warnings.warn(
        f"local.deploy({given}) is deprecated (removed in the release "
        f"after 0.1.0): pass container=ContainerOptions({replacement}) "
        "(from harness_run.local import ContainerOptions, ImageOptions)",
        DeprecationWarning,
        stacklevel=3,
    )
    if isolation != "container":
        return None  # as before: the container keywords do nothing for processes
    image = ImageOptions(
        base_image=keywords.get("base_image") or DEFAULT_BASE_IMAGE,
        ca_files=keywords.get("ca_files", ()),
    )
    return ContainerOptions(
        image=image,
        network_mode=keywords.get("network_mode", "host"),
        labels=keywords.get("labels") or {},
        docker_client=keywords.get("docker_client"),
    )


def get_engine(
    name: str,
    *,
    workdir: str | Path | None = None,
    version: str | None = None,
    docker_client: Any = None,
    idle_ttl: float | None = None,
    pool_after: float = DEFAULT_POOL_AFTER,
    max_idle_processes: int = DEFAULT_MAX_IDLE,
) -> Engine:
    """The engine last deployed under ``name`` in ``workdir`` (e.g. from another process), or its
    ``version`` (a digest); in containers when that was deployed with ``isolation="container"`` (on
    ``docker_client``, default ``DOCKER_HOST``; nothing is built)."""
    root = resolve_workdir(workdir if workdir is not None else default_workdir())
    lookup = SqliteStore(root)
    try:
        record = lookup.get_engine(name, version)
        known = sorted({e.name for e in lookup.list_engines()}) if record is None else []
    finally:
        lookup.close()
    if record is None:
        raise UsageError(f"no engine named {name!r} in {root}; deployed engines: {known or 'none'}")
    if record.runtime == "container":
        from harness_run.runtime.container import docker_client as client_of
        from harness_run.runtime.container import engine_for, share_store

        return engine_for(
            record,
            share_store(root),
            client_of(docker_client),
            idle_ttl=60.0 if idle_ttl is None else idle_ttl,
            pool_after=pool_after,
        )
    return LocalEngine(
        AgentSpec.from_dict(record.spec),
        workdir=root,
        pool_after=pool_after,
        idle_ttl=DEFAULT_IDLE_TTL if idle_ttl is None else idle_ttl,
        max_idle_processes=max_idle_processes,
    )


def run(
    spec: AgentSpec,
    prompt: str,
    *,
    secrets: Mapping[str, str] | None = None,
    config: TurnConfig | Mapping[str, Any] | None = None,
    session_config: SessionConfig | None = None,
    workdir: str | Path | None = None,
) -> RunResult:
    """One turn from synchronous code: deploy, start a session, run, return the result."""

    async def _main() -> RunResult:
        async with deploy(spec, workdir=workdir, idle_ttl=0) as engine:  # one turn: nothing to keep
            return await engine.start_session(session_config).run(prompt, secrets=secrets, config=config)

    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(_main())
    raise UsageError(
        "local.run() is for synchronous code; inside async code use "
        "`await local.deploy(spec).start_session().run(prompt)`"
    )
