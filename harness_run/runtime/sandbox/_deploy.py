"""``deploy()`` (CI/ops: build, push, apply, wait for the pool, record) and ``get_engine()`` (lookup).

Defaults for GCP: the image goes to Artifact Registry ``<location>-docker.pkg.dev/<project>/harness-run``
(``HARNESS_RUN_REGISTRY`` or ``ImageOptions(registry=)``), history to ``gs://<project>-harness-run``
(``HARNESS_RUN_STORE`` or ``store=``), and the cluster is the kubeconfig context of ``cluster=``
(``HARNESS_RUN_CLUSTER``), else the current one, checked against ``project``/``location``
(:class:`~harness_run.runtime.sandbox._options.ClusterTarget`).
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any

from harness_run import telemetry
from harness_run.compiler import BuildPlan, ImageOptions, PodOptions, versioned_name
from harness_run.errors import BuildError, InfrastructureError, UsageError
from harness_run.runtime import record_engine
from harness_run.runtime.sandbox._cluster import connect
from harness_run.runtime.sandbox._engine import SandboxEngine
from harness_run.runtime.sandbox._kube import Kube, Obj, get_map, get_str
from harness_run.runtime.sandbox._options import ClaimOptions, ClusterTarget
from harness_run.runtime.sandbox._progress import Progress
from harness_run.runtime.sandbox._versions import RUNTIME, delete_version, find_version
from harness_run.spec import AgentSpec
from harness_run.store import HistoryStore, open_store
from harness_run.vocab import k8s

__all__ = [
    "default_registry",
    "default_store_url",
    "delete_version",
    "deploy",
    "get_engine",
    "pod_env",
    "publish_image",
]

ENV_REGISTRY = "HARNESS_RUN_REGISTRY"
ENV_STORE = "HARNESS_RUN_STORE"
ENV_POOL_AFTER = "HARNESS_RUN_POOL_AFTER"
ENV_VERTEX_PROJECT = "HARNESS_RUN_VERTEX_PROJECT"
ENV_VERTEX_REGION = "HARNESS_RUN_VERTEX_REGION"
VERTEX_REGION_VARIABLE = "CLOUD_ML_REGION"
_RESERVED = {
    ENV_STORE: "pass store= instead",
    ENV_VERTEX_PROJECT: "it is the deploy's project=",
    ENV_VERTEX_REGION: f"name the region in the spec: env={{{VERTEX_REGION_VARIABLE!r}: ...}}",
}


def default_registry(project: str, location: str) -> str:
    return os.environ.get(ENV_REGISTRY) or f"{location}-docker.pkg.dev/{project}/harness-run"


def default_store_url(project: str) -> str:
    return os.environ.get(ENV_STORE) or f"gs://{project}-harness-run"


def pod_env(spec: AgentSpec, pods: PodOptions, *, store_url: str, project: str) -> dict[str, str]:
    """The sandbox container's environment: ``pods.env`` and the worker's settings. Claude on Vertex
    AI uses the region the spec names (``env={"CLOUD_ML_REGION": ...}``), else the worker's
    default ``global`` (what Claude's Vertex AI docs use) — never the deploy's ``location``, which
    is where the registry and cluster are, not where the model is served."""
    for name, hint in _RESERVED.items():
        if name in pods.env:
            raise UsageError(f"PodOptions.env must not set {name}: {hint}")
    # the client decides when a sandbox's idle workspace is lent (ClaimOptions.pool_after): the
    # sessions whose folders are in a sandbox are only those the client moved out of it
    env = {ENV_POOL_AFTER: "0", **pods.env, ENV_STORE: store_url, ENV_VERTEX_PROJECT: project}
    region = spec.env.get(VERTEX_REGION_VARIABLE, "").strip()
    if region:
        env[ENV_VERTEX_REGION] = region
    return env


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


@telemetry.traced("harness_run.deploy")
def deploy(
    spec: AgentSpec,
    *,
    project: str,
    location: str,
    warm_pool: bool | int = True,
    cluster: str | ClusterTarget | None = None,
    image: ImageOptions | None = None,
    pods: PodOptions | None = None,
    claims: ClaimOptions | None = None,
    store: str | None = None,
    docker_client: Any = None,
    ready_timeout: float = 600.0,
    progress: bool = True,
) -> SandboxEngine:
    """Build, push and deploy ``spec`` as an engine version on Agent Sandbox; return the engine.

    Steps (each printed unless ``progress=False``): pick the cluster; compile; build the image and
    push it to the registry, unless an image with this digest is already there (then nothing is
    built or pushed); apply the ServiceAccount, egress policies, SandboxTemplate and
    SandboxWarmPool (created, or merge-patched when they exist); wait until the pool's sandboxes
    are Ready; write the engine record to the history store. Secrets are never part of any of it:
    they come with each run.

    - ``project``, ``location``: the GCP project and region (``us-central1``) of the registry,
      the history bucket and the cluster.
    - ``warm_pool``: True (one ready sandbox), False (none: every turn cold-starts) or a number.
    - ``cluster``: the GKE cluster's name, or a :class:`ClusterTarget` (context, kubeconfig,
      namespace, api_client). Default: ``$HARNESS_RUN_CLUSTER``, else the current kubeconfig
      context; either way a context of a GKE cluster in another project or location is refused.
    - ``image``: :class:`~harness_run.compiler.ImageOptions` (base image, CA files, build network,
      registry; default registry ``$HARNESS_RUN_REGISTRY``, else
      ``<location>-docker.pkg.dev/<project>/harness-run``).
    - ``pods``: :class:`~harness_run.compiler.PodOptions` (runtime class, default ``gvisor``;
      a Google service account; extra non-secret env). The pods reach GCS and Vertex AI as their
      Kubernetes ServiceAccount through Workload Identity Federation (what
      ``harness-run-gcp-setup`` grants the namespace), or as ``gcp_service_account`` when given.
    - ``claims``: :class:`ClaimOptions` of the returned engine (idle TTL, claim timeout, router).
    - ``store``: the history store's URL (default ``$HARNESS_RUN_STORE``, else
      ``gs://<project>-harness-run``); the sandboxes open it too.
    - ``docker_client``: the ``docker.DockerClient`` that builds and pushes (default: from the
      environment, ``DOCKER_HOST``).
    - ``ready_timeout``: seconds to wait for the warm pool to be Ready.
    """
    from harness_run.compiler import compile

    if not isinstance(spec, AgentSpec):  # pyright: ignore[reportUnnecessaryIsInstance]
        raise UsageError("sandbox.deploy() takes an AgentSpec; load files with AgentSpec.from_yaml(path)")
    if not project or not location:
        raise UsageError("sandbox.deploy() needs project= and location= (e.g. 'my-project', 'us-central1')")
    show = Progress(progress)
    telemetry.annotate(engine=spec.name, runtime=RUNTIME, project=project)
    pool_size = _pool_size(warm_pool)
    target = ClusterTarget.of(cluster)
    image = image if image is not None else ImageOptions()
    image = dataclasses.replace(image, registry=image.registry or default_registry(project, location))
    pods = pods if pods is not None else PodOptions()
    claims = claims if claims is not None else ClaimOptions()
    history, store_url = _open(store, project)
    if store_url is None:
        raise UsageError(
            "deploy(store=) takes the store's URL (gs://bucket/prefix), which the sandboxes open"
        )
    pods = dataclasses.replace(pods, env=pod_env(spec, pods, store_url=store_url, project=project))
    connection = connect(target, project=project, location=location, caller="sandbox.deploy()")
    kube = Kube(connection.api_client, target.namespace)
    show.step("cluster", f"{connection.source} ({kube.server}), namespace {kube.namespace}")
    plan = compile(spec, image=image, pods=pods, namespace=target.namespace, pool_size=pool_size)
    show.step("compile", f"{spec.name} version {plan.short} ({len(plan.files)} files)")
    publish_image(plan, docker_client, show)
    for obj in plan.manifests:
        action, _ = kube.apply(obj)
        show.step("apply", f"{obj['kind']} {obj['metadata']['name']} {action}")
    pool = versioned_name(spec.name, plan.short)
    if pool_size:
        _wait_pool(kube, pool, pool_size, ready_timeout)
        show.step("pool ready", f"{pool}: {pool_size} sandbox{'es' if pool_size != 1 else ''} ready")
    else:
        show.step("pool ready", f"{pool}: no warm sandboxes (warm_pool=False: each turn cold-starts)")
    record = record_engine(history, spec, plan.digest, RUNTIME)
    telemetry.annotate(version=plan.short)
    show.step("done", f"engine {spec.name} version {plan.short} (image {plan.image})")
    return SandboxEngine(record, store=history, kube=kube, options=claims)


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


def publish_image(plan: BuildPlan, docker_client: Any, show: Progress) -> bool:
    """Build ``plan``'s image and push it, unless the registry already has its digest tag (then
    nothing is built or pushed). True when it was built. Also used by ``harness-run serve deploy``."""
    from harness_run.compiler import build_image

    client = _docker(docker_client)
    if _in_registry(client, plan.image):
        show.step("build", f"{plan.image} is already in the registry: nothing to build or push")
        return False
    show.step("build", f"building {plan.image}")
    build_image(plan, client=client, progress=show.log)
    show.step("push", f"pushing {plan.image}")
    _push(client, plan.image)
    show.step("push", f"{plan.image} pushed")
    return True


@telemetry.traced("harness_run.image.push")
def _push(client: Any, image: str) -> None:
    import docker.errors

    repository, _, tag = image.rpartition(":")
    try:
        for item in client.api.push(repository, tag=tag, stream=True, decode=True):
            chunk = get_map({"chunk": item}, "chunk")
            if "error" in chunk or "errorDetail" in chunk:
                message = get_str(chunk, "error") or get_str(chunk, "errorDetail", "message") or str(chunk)
                raise BuildError(
                    f"pushing {image} failed: {message}; check the registry and its credentials "
                    "(`gcloud auth configure-docker <location>-docker.pkg.dev`)",
                    retryable=True,
                )
    except docker.errors.DockerException as exc:
        raise BuildError(f"pushing {image} failed: {exc}", retryable=True) from None


# --- pool ------------------------------------------------------------------------------------------


@telemetry.traced("harness_run.deploy.pool_ready")
def _wait_pool(kube: Kube, pool: str, replicas: int, timeout: float) -> None:
    def ready(obj: Obj | None) -> bool:
        return obj is None or int(get_str(obj, "status", "readyReplicas") or 0) >= replicas

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
    cluster: str | ClusterTarget | None = None,
    claims: ClaimOptions | None = None,
    store: str | HistoryStore | None = None,
) -> SandboxEngine:
    """The deployed engine ``name`` (its latest version, or ``version``: a digest or a prefix of it).

    Only looks up (never deploys): reads the engine record from the history store (``store``,
    default ``$HARNESS_RUN_STORE``, else ``gs://<project>-harness-run``). ``cluster`` is the same
    as :func:`deploy`'s and ``claims`` are :class:`ClaimOptions`. The cluster is reached only when
    a turn first claims a sandbox (or a version is deleted): ``versions()``, ``list_sessions()``
    and ``get_session(id).history()`` need no kubeconfig. The kubeconfig context is chosen and
    checked against ``project``/``location`` then.
    """
    if not project or not location:
        raise UsageError("sandbox.get_engine() needs project= and location=")
    target = ClusterTarget.of(cluster)
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

    def connect_now() -> Any:
        return connect(target, project=project, location=location, caller="sandbox.get_engine()").api_client

    kube = Kube(target.api_client, target.namespace, connect=connect_now)
    return SandboxEngine(record, store=history, kube=kube, options=claims or ClaimOptions())
