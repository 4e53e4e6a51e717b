"""``deploy()`` (CI/ops: build, push, apply, wait for the pool, record) and ``get_engine()`` (lookup).

Defaults for GCP: the image goes to Artifact Registry ``<location>-docker.pkg.dev/<project>/harness-run``
(``HARNESS_RUN_REGISTRY`` or ``registry=`` override), history to ``gs://<project>-harness-run``
(``HARNESS_RUN_STORE`` or ``store=``), the cluster from ``KUBECONFIG`` (or ``api_client=``).
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from harness_run.compiler import BuildPlan, versioned_name
from harness_run.errors import BuildError, InfrastructureError, UsageError
from harness_run.runtime.sandbox._engine import SandboxEngine
from harness_run.runtime.sandbox._kube import Kube, as_obj, load_api_client
from harness_run.runtime.sandbox._progress import Progress
from harness_run.runtime.sandbox._versions import RUNTIME, delete_version, find_version
from harness_run.spec import AgentSpec
from harness_run.store import EngineRecord, HistoryStore, open_store
from harness_run.vocab import k8s
from harness_run.vocab.pins import DEFAULT_BASE_IMAGE

__all__ = ["default_registry", "default_store_url", "delete_version", "deploy", "get_engine"]

ENV_REGISTRY = "HARNESS_RUN_REGISTRY"
ENV_STORE = "HARNESS_RUN_STORE"
ENV_VERTEX_PROJECT = "HARNESS_RUN_VERTEX_PROJECT"
ENV_VERTEX_REGION = "HARNESS_RUN_VERTEX_REGION"


def default_registry(project: str, location: str) -> str:
    return os.environ.get(ENV_REGISTRY) or f"{location}-docker.pkg.dev/{project}/harness-run"


def default_store_url(project: str) -> str:
    return os.environ.get(ENV_STORE) or f"gs://{project}-harness-run"


def _pool_size(warm_pool: bool | int) -> int:
    if isinstance(warm_pool, bool):
        return 1 if warm_pool else 0
    if warm_pool < 0:  # pyright: ignore[reportUnnecessaryComparison]
        raise UsageError(f"warm_pool must be True, False or a number of sandboxes >= 0, not {warm_pool!r}")
    return int(warm_pool)


def _open(store: str | HistoryStore | None, project: str) -> tuple[HistoryStore, str | None]:
    if store is None or isinstance(store, str):
        url = store or default_store_url(project)
        return open_store(url), url
    return store, getattr(store, "url", None)


def deploy(
    spec: AgentSpec,
    *,
    project: str,
    location: str,
    warm_pool: bool | int = True,
    namespace: str = "default",
    registry: str | None = None,
    store: str | None = None,
    api_client: Any = None,
    docker_client: Any = None,
    base_image: str = DEFAULT_BASE_IMAGE,
    network_mode: str | None = None,
    ca_files: Sequence[str | Path] = (),
    runtime_class: str | None = "gvisor",
    gcp_service_account: str | None = None,
    idle_ttl: float = 60.0,
    claim_timeout: float = 120.0,
    ready_timeout: float = 600.0,
    router_url: str | None = None,
    progress: bool = True,
) -> SandboxEngine:
    """Build, push and deploy ``spec`` as an engine version on Agent Sandbox; return the engine.

    Steps (each printed unless ``progress=False``): compile; build the image and push it to the
    registry, unless an image with this digest is already there (then nothing is built or
    pushed); apply the ServiceAccount, egress policies, SandboxTemplate and SandboxWarmPool
    (created, or merge-patched when they exist); wait until the pool's sandboxes are Ready; write
    the engine record to the history store. Secrets are never part of any of it: they come with
    each run. ``warm_pool``: True (one ready sandbox), False (none: every turn cold-starts) or a
    number. The pods reach GCS and Vertex AI as their Kubernetes ServiceAccount through Workload
    Identity Federation (what ``harness-run-gcp-setup`` grants the namespace); pass
    ``gcp_service_account`` to have them act as a Google service account instead.
    """
    from harness_run.compiler import compile

    if not isinstance(spec, AgentSpec):  # pyright: ignore[reportUnnecessaryIsInstance]
        raise UsageError("sandbox.deploy() takes an AgentSpec; load files with AgentSpec.from_yaml(path)")
    if not project or not location:
        raise UsageError("sandbox.deploy() needs project= and location= (e.g. 'my-project', 'us-central1')")
    show = Progress(progress)
    pool_size = _pool_size(warm_pool)
    repo = (registry or default_registry(project, location)).rstrip("/")
    history, store_url = _open(store, project)
    if store_url is None:
        raise UsageError(
            "deploy(store=) takes the store's URL (gs://bucket/prefix), which the sandboxes open"
        )
    kube = Kube(load_api_client(api_client), namespace)
    plan = compile(
        spec,
        base_image=base_image,
        ca_files=ca_files,
        build_network=network_mode,
        runtime_class=runtime_class,
        image_repository=f"{repo}/{spec.name}",
        namespace=namespace,
        pool_size=pool_size,
        pod_env={ENV_STORE: store_url, ENV_VERTEX_PROJECT: project, ENV_VERTEX_REGION: location},
        gcp_service_account=gcp_service_account,
    )
    show.step("compile", f"{spec.name} version {plan.short} ({len(plan.files)} files)")
    _image(plan, docker_client, show)
    for obj in plan.manifests:
        action, _ = kube.apply(obj)
        show.step("apply", f"{obj['kind']} {obj['metadata']['name']} {action}")
    pool = versioned_name(spec.name, plan.short)
    if pool_size:
        _wait_pool(kube, pool, pool_size, ready_timeout)
        show.step("pool ready", f"{pool}: {pool_size} sandbox{'es' if pool_size != 1 else ''} ready")
    else:
        show.step("pool ready", f"{pool}: no warm sandboxes (warm_pool=False: each turn cold-starts)")
    existing = history.get_engine(spec.name, plan.digest)
    record = EngineRecord(
        name=spec.name,
        version=plan.digest,
        spec=spec.to_dict(),
        runtime=RUNTIME,
        created_at=time.time()
        if existing is None or existing.version != plan.digest
        else existing.created_at,
    )
    history.put_engine(record)
    show.step("done", f"engine {spec.name} version {plan.short} (image {plan.image})")
    return SandboxEngine(
        record,
        store=history,
        kube=kube,
        idle_ttl=idle_ttl,
        claim_timeout=claim_timeout,
        router_url=router_url,
    )


# --- image -----------------------------------------------------------------------------------------


def _docker(docker_client: Any) -> Any:
    if docker_client is not None:
        return docker_client
    try:
        import docker
        import docker.errors
    except ImportError:
        raise UsageError("deploying needs the docker SDK: pip install 'harness-run[sandbox]'") from None
    try:
        return docker.from_env(timeout=600)
    except docker.errors.DockerException as exc:
        raise BuildError(
            f"no Docker engine reachable ({exc}); start one or set DOCKER_HOST", retryable=True
        ) from None


def _in_registry(client: Any, image: str) -> bool:
    """True when ``image`` (repo:tag) is already in its registry (asked through the Docker engine,
    with the engine's registry credentials)."""
    import docker.errors

    try:
        client.api.inspect_distribution(image)
    except docker.errors.NotFound:
        return False
    except docker.errors.APIError as exc:
        text = str(exc).lower()
        if "not found" in text or "manifest unknown" in text or "404" in text:
            return False
        raise BuildError(
            f"cannot ask the registry whether {image} exists ({exc}); check the registry address and "
            "credentials (`gcloud auth configure-docker <location>-docker.pkg.dev`)",
            retryable=True,
        ) from None
    return True


def _image(plan: BuildPlan, docker_client: Any, show: Progress) -> None:
    from harness_run.compiler import build_image

    client = _docker(docker_client)
    if _in_registry(client, plan.image):
        show.step("build", f"{plan.image} is already in the registry: nothing to build or push")
        return
    show.step("build", f"building {plan.image}")
    build_image(plan, client=client, progress=show.log)
    show.step("push", f"pushing {plan.image}")
    _push(client, plan.image)
    show.step("push", f"{plan.image} pushed")


def _push(client: Any, image: str) -> None:
    import docker.errors

    repository, _, tag = image.rpartition(":")
    try:
        for raw in client.api.push(repository, tag=tag, stream=True, decode=True):
            chunk = as_obj(raw)
            if "error" in chunk or "errorDetail" in chunk:
                message = str(chunk.get("error") or as_obj(chunk.get("errorDetail")).get("message") or chunk)
                raise BuildError(
                    f"pushing {image} failed: {message}; check the registry and its credentials "
                    "(`gcloud auth configure-docker <location>-docker.pkg.dev`)",
                    retryable=True,
                )
    except docker.errors.DockerException as exc:
        raise BuildError(f"pushing {image} failed: {exc}", retryable=True) from None


# --- pool ------------------------------------------------------------------------------------------


def _wait_pool(kube: Kube, pool: str, replicas: int, timeout: float) -> None:
    def ready(obj: dict[str, Any] | None) -> bool:
        status = as_obj(as_obj(obj).get("status"))
        return obj is None or int(status.get("readyReplicas") or 0) >= replicas

    try:
        obj = kube.wait_for(k8s.SANDBOX_WARM_POOL, pool, ready, timeout)
    except TimeoutError:
        raise InfrastructureError(
            f"warm pool {pool} (namespace {kube.namespace}) has not got {replicas} Ready sandboxes after "
            f"{timeout:g} s; check `kubectl get sandboxwarmpool,sandbox -n {kube.namespace}` and the "
            "controller's events (image pull, node capacity, runtime class)",
            retryable=True,
        ) from None
    if obj is None:
        raise InfrastructureError(f"warm pool {pool} was deleted while deploying; deploy again")


# --- lookup and deletion -----------------------------------------------------------------------------


def get_engine(
    name: str,
    *,
    project: str,
    location: str,
    version: str | None = None,
    store: str | HistoryStore | None = None,
    namespace: str = "default",
    api_client: Any = None,
    idle_ttl: float = 60.0,
    claim_timeout: float = 120.0,
    router_url: str | None = None,
) -> SandboxEngine:
    """The deployed engine ``name`` (its latest version, or ``version``: a digest or a prefix of it).

    Only looks up (never deploys). ``location`` names the region of the default registry/store.
    """
    if not project or not location:
        raise UsageError("sandbox.get_engine() needs project= and location=")
    history, url = _open(store, project)
    record = find_version(history, name, version)
    if record is None:
        known = sorted({e.name for e in history.list_engines() if e.runtime == RUNTIME})
        which = f"version {version!r} of engine {name!r}" if version else f"engine {name!r}"
        raise UsageError(
            f"no {which} is deployed in the history store {url or history!r} (deployed: "
            f"{known or 'none'}); deploy it first with harness_run.sandbox.deploy(spec, project={project!r}, "
            f"location={location!r})"
        )
    kube = Kube(load_api_client(api_client), namespace)
    return SandboxEngine(
        record,
        store=history,
        kube=kube,
        idle_ttl=idle_ttl,
        claim_timeout=claim_timeout,
        router_url=router_url,
    )
