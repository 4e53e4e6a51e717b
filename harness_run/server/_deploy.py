"""``harness-run serve deploy``: compile the server image, build and push it unless the registry has its
digest, then create or update the Cloud Run service (nothing is sent when nothing changed).

Safe by default: the service is private (IAM invoker check on), serves only sandbox engines (a local
or container engine's agent would run inside the service, as its identity), takes model keys from
Secret Manager, and sets its request timeout and concurrency explicitly."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from harness_run.compiler import ImageOptions, compile_server
from harness_run.errors import UsageError
from harness_run.runtime.sandbox import Progress, default_registry, publish_image
from harness_run.server._cloudrun import (
    DEFAULT_CONCURRENCY,
    DEFAULT_TIMEOUT,
    Action,
    ServiceSettings,
    apply_service,
    credential_like,
    local_engine_refusal,
    run_client,
)
from harness_run.server._sandbox import SandboxAccess
from harness_run.spec import AgentSpec
from harness_run.store import HistoryStore, open_store
from harness_run.vocab.gcp import (
    DEFAULT_CLUSTER,
    DEFAULT_SERVICE,
    SecretRef,
    parse_secret,
    server_account_email,
)

__all__ = ["ServerDeployment", "default_service_account", "deploy_server"]

"""The GKE cluster ``harness-run-gcp-setup`` creates (its ``--cluster`` default)."""
_REGION = re.compile(r"[a-z]+-[a-z]+[0-9]")
_PROJECT = re.compile(r"[a-z][a-z0-9-]{4,28}[a-z0-9]")


@dataclass(frozen=True, slots=True)
class ServerDeployment:
    """What ``deploy_server`` did: the service's ``url``, the ``image`` (tagged with the short
    ``digest``), whether the image was ``built`` (else the registry had it) and what happened to the
    service (``created``, ``updated`` or ``unchanged``)."""

    url: str
    service: str
    image: str
    digest: str
    built: bool
    action: Action
    engines: tuple[str, ...]


def default_service_account(project: str) -> str:
    """``harness-run-server@<project>.iam.gserviceaccount.com`` (made by ``harness-run-gcp-setup``)."""
    return server_account_email(project)


def _check(project: str, region: str, store: str | None) -> str:
    if not project or not region:
        raise UsageError(
            "serve deploy needs --project and --region (e.g. --project my-project --region us-central1)"
        )
    if not _PROJECT.fullmatch(project):
        raise UsageError(f"--project {project!r} is not a GCP project id (e.g. 'my-project')")
    if not _REGION.fullmatch(region):
        raise UsageError(f"--region {region!r} is not a Cloud Run region (e.g. 'us-central1')")
    url = store or f"gs://{project}-harness-run"
    if not url.startswith("gs://") or len(url) <= len("gs://"):
        raise UsageError(
            f"--store {url!r} is not a gs://bucket/prefix URL: a Cloud Run instance keeps no files, so the "
            "deployed server's history, sessions and API keys live in a bucket"
        )
    return url


def _served(history: HistoryStore, specs: Sequence[AgentSpec]) -> list[str]:
    """The sandbox engines the server will serve (the newest record of each name, as the server picks).
    A baked-in spec or a local/container engine is refused: its agent would run inside the service."""
    refused = [
        why for spec in specs if (why := local_engine_refusal(f"{spec.name} (--spec)", "local")) is not None
    ]
    newest = {record.name: record for record in history.list_engines()}
    refused += [why for r in newest.values() if (why := local_engine_refusal(r.name, r.runtime)) is not None]
    if refused:
        raise UsageError("serve deploy refuses to serve it: " + "; ".join(refused))
    return sorted(name for name, record in newest.items() if record.runtime == "sandbox")


def _secrets(secrets: Sequence[str | SecretRef]) -> tuple[SecretRef, ...]:
    return tuple(ref if isinstance(ref, SecretRef) else parse_secret(ref) for ref in secrets)


def _sandbox_access(project: str, region: str, given: SandboxAccess | None) -> SandboxAccess:
    """The sandbox engines' cluster as the service is told it: a GKE cluster by name (a Cloud Run
    instance has no kubeconfig to name a context in)."""
    access = given if given is not None else SandboxAccess()
    if access.context or access.api_client is not None:
        raise UsageError(
            "serve deploy names the sandbox engines' cluster by its GKE name (--cluster NAME): the Cloud "
            "Run service has no kubeconfig, so a context or a client cannot be passed on"
        )
    access = dataclasses.replace(
        access,
        project=access.project or project,
        location=access.location or region,
        cluster=access.cluster or DEFAULT_CLUSTER,
    )
    access.check()
    return access


def deploy_server(
    *,
    project: str,
    region: str,
    store: str | None = None,
    service: str = DEFAULT_SERVICE,
    service_account: str | None = None,
    specs: Sequence[AgentSpec] = (),
    harnesses: Sequence[str] = (),
    image: ImageOptions | None = None,
    min_instances: int = 1,
    max_instances: int = 1,
    public: bool = False,
    secrets: Sequence[str | SecretRef] = (),
    env: Mapping[str, str] | None = None,
    concurrency: int | None = None,
    request_timeout: int | None = None,
    sandbox: SandboxAccess | None = None,
    docker_client: Any = None,
    client: Any = None,
    progress: bool = True,
    timeout: float = 900.0,
) -> ServerDeployment:
    """Deploy ``harness-run serve`` to Cloud Run as ``service`` in ``project``/``region``.

    The image (:func:`~harness_run.compiler.compile_server`: the harness CLIs of the served engines
    plus ``harnesses``, the library, ``specs``) is built and pushed to ``image.registry`` (default
    ``$HARNESS_RUN_REGISTRY``, else ``<region>-docker.pkg.dev/<project>/harness-run``) unless the
    registry already has its digest tag. The service runs it as ``service_account`` (default
    :func:`default_service_account`) over ``store`` (default ``gs://<project>-harness-run``): the
    sandbox engines recorded there are served. A local or container engine there, or any ``specs``
    (a baked-in spec is a local engine), is refused with :class:`UsageError`: its agent would run
    inside the service, as the service's identity. With the image and settings unchanged no update
    is sent. ``client`` is a ``run_v2.ServicesClient`` (default
    :func:`~harness_run.server._cloudrun.run_client`).

    The service is private (callers need ``roles/run.invoker``) unless ``public``. ``secrets``:
    ``NAME=projects/P/secrets/S:latest`` references (or :class:`~harness_run.vocab.gcp.SecretRef`)
    that Cloud Run resolves into the environment; ``env``: plain values (a credential-like name is
    warned about: its value would be readable in the service's configuration). ``concurrency`` and
    ``request_timeout`` (seconds; None: 250 and 3600) are the service's requests per instance and
    request timeout.

    When the store records sandbox engines, the service is told their cluster (``sandbox``:
    :class:`SandboxAccess`; default project ``project``, location ``region``, GKE cluster
    ``harness-run``, what ``harness-run-gcp-setup`` creates) through its environment; with no
    kubeconfig there, the server looks the cluster up through the GKE API as its service account.
    """
    store_url = _check(project, region, store)
    sandbox = _sandbox_access(project, region, sandbox)
    show = Progress(progress)
    settings = ServiceSettings(  # checked before anything is built
        project=project,
        region=region,
        service=service,
        image="pending",
        store=store_url,
        service_account=service_account or default_service_account(project),
        min_instances=min_instances,
        max_instances=max_instances,
        public=public,
        concurrency=DEFAULT_CONCURRENCY if concurrency is None else concurrency,
        timeout_seconds=DEFAULT_TIMEOUT if request_timeout is None else request_timeout,
        env=dict(env or {}),
        secrets=_secrets(secrets),
    )
    history = open_store(store_url)
    try:
        engines = _served(history, specs)
        keys = getattr(history, "list_api_keys", None)
        has_keys = bool(keys()) if keys is not None else False
    finally:
        history.close()
    if not engines:
        raise UsageError(
            f"nothing to serve: {store_url} records no sandbox engine; deploy one first with "
            f"harness_run.sandbox.deploy(spec, project={project!r}, location={region!r}, "
            f"store={store_url!r}) (its turns run in Agent Sandbox, not inside the service)"
        )
    where = f"project {sandbox.project}, location {sandbox.location}, cluster {sandbox.cluster}"
    show.step("engines", f"sandbox engines {', '.join(engines)} from {store_url}, claiming on {where}")
    settings = dataclasses.replace(settings, env={**settings.env, **sandbox.env()})
    _announce(show, settings)
    if not has_keys:
        show.step(
            "api keys",
            f"none in {store_url} yet: every request will get 401 until you run "
            f"`harness-run serve keys create --name NAME --store {store_url}`",
        )
    image = image if image is not None else ImageOptions()
    image = dataclasses.replace(image, registry=image.registry or default_registry(project, region))
    plan = compile_server(specs=(), harnesses=sorted(set(harnesses)), image=image)
    show.step("compile", f"server image {plan.short} ({len(plan.files)} files, {', '.join(plan.harnesses)})")
    built = publish_image(plan, docker_client, show)
    settings = dataclasses.replace(settings, image=plan.image)
    action, url = apply_service(client if client is not None else run_client(), settings, step=show.step)
    show.step("done", f"{service} {action}: {url}")
    return ServerDeployment(
        url=url,
        service=service,
        image=plan.image,
        digest=plan.digest,
        built=built,
        action=action,
        engines=tuple(engines),
    )


def _announce(show: Progress, settings: ServiceSettings) -> None:
    """Say who can call the service, and what a plain-text credential would cost."""
    s = settings
    if s.public:
        show.step(
            "access",
            f"PUBLIC: anyone on the internet can call {s.service}; the server's API keys are the only gate",
        )
    else:
        show.step(
            "access",
            f"private: callers need roles/run.invoker on {s.service} and an identity token in "
            "X-Serverless-Authorization (their API key stays in Authorization); --public opens it",
        )
    for name in sorted(s.env):
        if credential_like(name):
            show.step(
                "warning",
                f"--env {name} puts its value in the service's configuration, in plain text (anyone who "
                f"may read the service sees it); use "
                f"--secret {name}=projects/{s.project}/secrets/SECRET:latest",
            )
    if "HARNESS_RUN_SERVER_SECRET" not in {r.env for r in s.secrets}:
        show.step(
            "warning",
            "no --secret HARNESS_RUN_SERVER_SECRET=projects/.../secrets/S:latest: the deployed server "
            "seals and checks API key records with it, so without the same value here and for "
            "`serve keys create`, no key made outside the instance is accepted",
        )
    for ref in s.secrets:
        show.step(
            "secret", f"{ref.env} from {ref.resource} version {ref.version} (read when an instance starts)"
        )
    show.step("limits", f"request timeout {s.timeout_seconds} s, {s.concurrency} requests per instance")
