"""``deploy_daytona``: an engine version as a Daytona snapshot, its sessions in Daytona sandboxes.

The spec compiles into the image build context (:func:`harness_run.compiler.compile`); the snapshot
``harness-run-<name>-<short digest>`` is made once per version (a redeploy of an unchanged spec finds
it and does nothing):

- with ``registry``: the image is built on the local Docker engine, pushed to the registry and the
  snapshot made from its name (``CreateSnapshotParams(image="<registry>/<name>:<short>")``);
- without: from the context itself (``Image.from_dockerfile``: the SDK uploads the context and
  Daytona builds it).

Turns run on the in-image worker (:class:`~harness_run.runtime.worker_client.WorkerEngine`) in a sandbox
per session (:class:`DaytonaSandboxes`); history is ``store``, which this process and the sandboxes
share (``gs://…``, or a directory the sandboxes see through the Daytona volume ``store_volume``).
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, cast

from harness_run.errors import BuildError, InfrastructureError, UsageError, redact
from harness_run.runtime import record_engine
from harness_run.runtime.daytona._sandboxes import DaytonaSandboxes, daytona_client
from harness_run.runtime.worker_client import WorkerEngine
from harness_run.spec import AgentSpec
from harness_run.store import HistoryStore, open_store
from harness_run.vocab.pins import DEFAULT_BASE_IMAGE

__all__ = ["RUNTIME", "WORKER_COMMAND", "DaytonaEngine", "deploy_daytona", "snapshot_name"]

RUNTIME = "daytona"
WORKER_COMMAND = ["python", "-m", "harness_run.worker"]
_DIGEST_ARG = "ARG HARNESS_RUN_DIGEST\n"


class DaytonaEngine(WorkerEngine):
    """An engine whose sessions each run in their own Daytona sandbox (``provider="daytona"``).

    Closing it deletes this process's sandboxes, stopped ones included."""

    runtime = RUNTIME
    claims: DaytonaSandboxes

    @property
    def snapshot(self) -> str:
        return self.claims.snapshot

    def __repr__(self) -> str:
        return f"<DaytonaEngine {self.name} snapshot={self.snapshot}>"


def snapshot_name(spec_name: str, short: str) -> str:
    return f"harness-run-{spec_name}-{short}"


def deploy_daytona(
    spec: AgentSpec,
    *,
    store: str | HistoryStore,
    store_volume: str | None = None,
    api_key: str | None = None,
    api_url: str | None = None,
    target: str | None = None,
    registry: str | None = None,
    docker_client: Any = None,
    base_image: str = DEFAULT_BASE_IMAGE,
    ca_files: Sequence[str | Path] = (),
    idle_ttl: float = 300.0,
    claim_timeout: float = 300.0,
    env: Mapping[str, str] | None = None,
    labels: Mapping[str, str] | None = None,
    agent_netns: str = "own",
    auto_delete_minutes: int | None = None,
    progress: Callable[[str], None] | None = None,
) -> DaytonaEngine:
    """Compile ``spec``, make its Daytona snapshot unless it exists, record the engine version in
    ``store`` and return the engine (see the module docstring)."""
    from harness_run.compiler import ImageOptions, PodOptions, compile

    if not isinstance(spec, AgentSpec):  # pyright: ignore[reportUnnecessaryIsInstance]
        raise UsageError("deploy_daytona() takes an AgentSpec; load files with AgentSpec.from_yaml(path)")
    if spec.network.egress != "open":
        raise UsageError(
            f"network={spec.network.egress!r} cannot be enforced by provider 'daytona' here; use "
            "provider 'docker' or 'agent-sandbox', or network='open'"
        )
    image = ImageOptions(base_image=base_image, ca_files=ca_files, build_network="host", registry=registry)
    plan = compile(spec, image=image, pods=PodOptions(runtime_class=None))
    client = daytona_client(api_key, api_url, target)
    name = snapshot_name(spec.name, plan.short)
    say: Callable[[str], None] = progress or _quiet
    forms = [api_key] if api_key else []
    if _snapshot_state(client, name, forms) != "active":
        if registry is not None:
            _push(plan, docker_client, say)
            _create_snapshot(client, name, plan.image, say, forms)
        else:
            with tempfile.TemporaryDirectory(prefix="harness-run-daytona-") as tmp:
                plan.write(tmp)
                dockerfile = Path(tmp) / "context" / "Dockerfile"
                # Daytona builds without build args: the digest becomes the argument's default
                text = dockerfile.read_text().replace(_DIGEST_ARG, f"ARG HARNESS_RUN_DIGEST={plan.digest}\n")
                dockerfile.write_text(text)
                from daytona import Image

                _create_snapshot(client, name, Image.from_dockerfile(dockerfile), say, forms)
    history = open_store(store) if isinstance(store, str) else store
    record = record_engine(history, spec, plan.digest, RUNTIME)
    store_url = store if isinstance(store, str) else ""
    if not store_url and store_volume is None:
        raise UsageError("deploy_daytona(store=...) must be a URL the sandboxes can open (gs://…)")
    sandboxes = DaytonaSandboxes(
        client,
        snapshot=name,
        engine=spec.name,
        api_key=api_key,
        idle_ttl=idle_ttl,
        claim_timeout=claim_timeout,
        env=env,
        store_url=store_url,
        store_volume=store_volume,
        labels=labels,
        agent_netns=agent_netns,
        auto_delete_minutes=auto_delete_minutes,
    )
    return DaytonaEngine(record, store=history, claims=sandboxes, owns_store=isinstance(store, str))


def _quiet(_line: str) -> None:
    pass


def _snapshot_state(client: Any, name: str, forms: list[str]) -> str | None:
    from daytona import DaytonaError, DaytonaNotFoundError

    try:
        snapshot = client.snapshot.get(name)
    except DaytonaNotFoundError:
        return None
    except DaytonaError as exc:
        raise InfrastructureError(
            f"Daytona: cannot look up snapshot {name}: {redact(str(exc), forms)}", retryable=True
        ) from None
    return str(getattr(snapshot.state, "value", snapshot.state))


def _create_snapshot(
    client: Any, name: str, image: Any, say: Callable[[str], None], forms: list[str]
) -> None:
    from daytona import CreateSnapshotParams, DaytonaError

    say(f"creating Daytona snapshot {name}")
    try:
        client.snapshot.create(
            CreateSnapshotParams(name=name, image=image, entrypoint=WORKER_COMMAND), on_logs=say
        )
    except DaytonaError as exc:
        raise BuildError(f"Daytona: creating snapshot {name} failed: {redact(str(exc), forms)}") from None


def _push(plan: Any, docker_client: Any, say: Callable[[str], None]) -> None:
    """Build ``plan.image`` on the Docker engine unless it is there, and push it."""
    from harness_run.compiler import build_image
    from harness_run.compiler import docker_client as docker_of

    client = docker_of(docker_client)
    try:
        client.images.get(plan.image)
    except Exception:
        say(f"building {plan.image}")
        build_image(plan, client=client, progress=say)
    say(f"pushing {plan.image}")
    repository, _, tag = str(plan.image).rpartition(":")
    try:
        for item in client.api.push(repository, tag=tag, stream=True, decode=True):
            chunk = cast("dict[str, Any]", item) if isinstance(item, dict) else {}
            if "error" in chunk or "errorDetail" in chunk:
                raise BuildError(
                    f"pushing {plan.image} failed: {chunk.get('error') or chunk}", retryable=True
                )
    except BuildError:
        raise
    except Exception as exc:
        raise BuildError(f"pushing {plan.image} failed: {exc}", retryable=True) from None
