"""The server's Cloud Run service, through google-cloud-run's ``run_v2.ServicesClient`` (REST transport).

The service we want is built as a ``run_v2.Service`` from :class:`ServiceSettings`; its canonical
JSON's sha256 is kept on the service as the ``harness-run.dev/config-sha256`` annotation, so a
deploy whose settings and image are unchanged sends no update. API errors become one line saying
what to do (enable the API, grant a role, log in). ``google-cloud-run`` is imported only here.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, TypeVar

from harness_run.errors import InfrastructureError, UsageError

__all__ = [
    "CONFIG_ANNOTATION",
    "ENV_ENDPOINT",
    "ServiceSettings",
    "apply_service",
    "config_sha256",
    "run_client",
    "service_body",
]

ENV_ENDPOINT = "HARNESS_RUN_CLOUD_RUN_ENDPOINT"
"""Another Cloud Run API endpoint (a private one, or a stand-in: ``http://`` means no credentials)."""
CONFIG_ANNOTATION = "harness-run.dev/config-sha256"
_SERVICE_NAME = re.compile(r"[a-z]([-a-z0-9]{0,47}[a-z0-9])?")
_GSA = re.compile(r"[a-z0-9][a-z0-9._-]*@[a-z0-9][a-z0-9.-]*\.gserviceaccount\.com")
_T = TypeVar("_T")

Action = Literal["created", "updated", "unchanged"]


@dataclass(frozen=True, kw_only=True, slots=True)
class ServiceSettings:
    """The Cloud Run service of a server: where, which image, as whom, how big.

    Defaults keep one instance always running with its CPU always allocated (turns run after their
    request has been answered, and sessions live in the instance's workspace between turns), a
    one-hour request timeout (SSE streams) and session affinity. ``public``: the service takes
    requests from anyone (``invoker_iam_disabled``) and the server's own API keys guard every route
    but ``/healthz``; ``False`` keeps Cloud Run's IAM invoker check in front as well. ``env``: more
    (non-secret) settings of ``harness-run serve`` as environment variables, e.g. the cluster of the
    sandbox engines (:meth:`~harness_run.server.SandboxAccess.env`).
    """

    project: str
    region: str
    service: str
    image: str
    store: str
    service_account: str
    min_instances: int = 1
    max_instances: int = 1
    cpu: str = "2"
    memory: str = "4Gi"
    timeout_seconds: int = 3600
    public: bool = True
    port: int = 8080
    env: Mapping[str, str] = field(default_factory=dict[str, str])

    def __post_init__(self) -> None:
        if not _SERVICE_NAME.fullmatch(self.service):
            raise UsageError(
                f"--service {self.service!r} is not a Cloud Run service name (lowercase letters, digits "
                "and hyphens, starting with a letter, at most 49 characters)"
            )
        if not _GSA.fullmatch(self.service_account):
            raise UsageError(
                f"--service-account {self.service_account!r} is not a service account email, e.g. "
                f"harness-run-server@{self.project}.iam.gserviceaccount.com"
            )
        if self.min_instances < 0 or self.max_instances < max(1, self.min_instances):
            raise UsageError(
                f"--min-instances {self.min_instances} / --max-instances {self.max_instances}: need "
                "0 <= min <= max and max >= 1"
            )

    @property
    def parent(self) -> str:
        return f"projects/{self.project}/locations/{self.region}"

    @property
    def name(self) -> str:
        return f"{self.parent}/services/{self.service}"


def _run_v2() -> Any:
    """``google.cloud.run_v2``, untyped on purpose: proto-plus messages are dynamic, and a static
    ``from google.cloud import run_v2`` makes pyright resolve ``google.cloud`` past our storage stubs."""
    import importlib

    return importlib.import_module("google.cloud.run_v2")


def service_body(settings: ServiceSettings) -> Any:
    """The ``run_v2.Service`` for ``settings``, with its config hash annotation. Only the store's URL
    goes into the environment: secrets travel with each run, never in the service."""
    run_v2 = _run_v2()
    from google.protobuf import duration_pb2

    s = settings
    container = run_v2.Container(
        name="server",
        image=s.image,
        ports=[run_v2.ContainerPort(name="http1", container_port=s.port)],
        env=[
            run_v2.EnvVar(name=name, value=value)
            for name, value in [("HARNESS_RUN_STORE", s.store), *sorted(s.env.items())]
        ],
        resources=run_v2.ResourceRequirements(
            limits={"cpu": s.cpu, "memory": s.memory}, cpu_idle=False, startup_cpu_boost=True
        ),
        startup_probe=run_v2.Probe(
            http_get=run_v2.HTTPGetAction(path="/healthz", port=s.port),
            period_seconds=2,
            failure_threshold=60,
            timeout_seconds=2,
        ),
    )
    service = run_v2.Service(
        labels={"managed-by": "harness-run"},
        ingress=run_v2.IngressTraffic.INGRESS_TRAFFIC_ALL,
        invoker_iam_disabled=s.public,
        template=run_v2.RevisionTemplate(
            containers=[container],
            service_account=s.service_account,
            scaling=run_v2.RevisionScaling(
                min_instance_count=s.min_instances, max_instance_count=s.max_instances
            ),
            timeout=duration_pb2.Duration(seconds=s.timeout_seconds),
            session_affinity=True,
        ),
    )
    service.annotations[CONFIG_ANNOTATION] = config_sha256(service)
    return service


def config_sha256(service: Any) -> str:
    """sha256 of the service's canonical JSON, without our annotation (what a deploy compares)."""
    data: dict[str, Any] = json.loads(_run_v2().Service.to_json(service, sort_keys=True))
    annotations: dict[str, str] = data.get("annotations", {})
    annotations.pop(CONFIG_ANNOTATION, None)
    if not annotations:
        data.pop("annotations", None)
    return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()


def run_client(endpoint: str | None = None) -> Any:
    """A ``ServicesClient`` on the REST transport: Application Default Credentials against
    run.googleapis.com, or ``endpoint`` (default ``$HARNESS_RUN_CLOUD_RUN_ENDPOINT``); an ``http://``
    endpoint (a local stand-in) is called without credentials."""
    try:
        from google.auth import exceptions as auth_exceptions
        from google.auth.credentials import AnonymousCredentials

        run_v2 = _run_v2()
    except ImportError as exc:
        raise UsageError(
            f"deploying the server needs google-cloud-run ({exc}); pip install 'harness-run[sandbox]'"
        ) from None
    endpoint = endpoint or os.environ.get(ENV_ENDPOINT) or None
    options = {"api_endpoint": endpoint} if endpoint else None
    credentials = AnonymousCredentials() if endpoint and endpoint.startswith("http://") else None
    try:
        return run_v2.ServicesClient(credentials=credentials, transport="rest", client_options=options)
    except auth_exceptions.DefaultCredentialsError:
        raise UsageError(
            "no Google credentials to call Cloud Run: run `gcloud auth application-default login` "
            "(or set GOOGLE_APPLICATION_CREDENTIALS)"
        ) from None


def apply_service(
    client: Any,
    settings: ServiceSettings,
    *,
    step: Callable[[str, str], None],
    timeout: float = 900.0,
) -> tuple[Action, str]:
    """Create the service, update it when its config or image changed, or leave it alone; wait for
    the new revision to serve. Returns what was done and the service's URL."""
    from google.api_core import exceptions as gexc

    wanted = service_body(settings)
    call = _Caller(settings, str(getattr(client, "api_endpoint", None) or "run.googleapis.com"))
    current: Any
    try:
        current = call("read the service", lambda: client.get_service(name=settings.name))
    except gexc.NotFound:
        current = None
    if current is not None and _same(current, wanted):
        step("cloud run", f"service {settings.service} is up to date: nothing sent")
        return "unchanged", str(current.uri)
    if current is None:
        where = f"{settings.service} in {settings.region}"
        step("cloud run", f"creating service {where} (waiting for it to serve)")
        operation: Any = call(
            "create the service",
            lambda: client.create_service(
                parent=settings.parent, service=wanted, service_id=settings.service
            ),
        )
        action: Action = "created"
    else:
        wanted.name = settings.name
        step("cloud run", f"updating service {settings.service} (waiting for the new revision to serve)")
        operation = call("update the service", lambda: client.update_service(service=wanted))
        action = "updated"
    done: Any = call("wait for the revision", lambda: operation.result(timeout=timeout), waiting=True)
    return action, str(done.uri)


def _same(current: Any, wanted: Any) -> bool:
    images = [str(c.image) for c in current.template.containers]
    return current.annotations.get(CONFIG_ANNOTATION) == wanted.annotations[CONFIG_ANNOTATION] and images == [
        c.image for c in wanted.template.containers
    ]


class _Caller:
    """Runs one API call; its errors -> one line naming what to do."""

    def __init__(self, settings: ServiceSettings, endpoint: str) -> None:
        self.s = settings
        self.endpoint = endpoint

    def __call__(self, what: str, fn: Callable[[], _T], *, waiting: bool = False) -> _T:
        from concurrent.futures import TimeoutError as FutureTimeout

        from google.api_core import exceptions as gexc
        from google.auth import exceptions as auth_exceptions

        s = self.s
        try:
            return fn()
        except gexc.NotFound:
            if waiting:
                raise InfrastructureError(
                    f"Cloud Run lost the operation of {s.service} while waiting; run the deploy again"
                ) from None
            raise
        except gexc.Forbidden as exc:
            raise UsageError(_forbidden(s, what, exc)) from None
        except (gexc.Unauthorized, auth_exceptions.GoogleAuthError) as exc:
            raise UsageError(
                f"cannot {what}: not logged in to Google Cloud ({_message(exc)}); run "
                "`gcloud auth application-default login`"
            ) from None
        except FutureTimeout:
            raise InfrastructureError(
                f"service {s.service} did not get a serving revision in time; see "
                f"`gcloud run services describe {s.service} --region {s.region} --project {s.project}`",
                retryable=True,
            ) from None
        except gexc.GoogleAPICallError as exc:
            if waiting:
                raise InfrastructureError(
                    f"Cloud Run could not start the server's new revision: {_message(exc)}; read its logs "
                    f"with `gcloud run services logs read {s.service} --region {s.region} --project "
                    f"{s.project}`"
                ) from None
            code = exc.code or 0
            raise InfrastructureError(
                f"cannot {what} (Cloud Run answered {code}): {_message(exc)}",
                retryable=code == 429 or code >= 500,
            ) from None
        except OSError as exc:  # requests' ConnectionError and timeouts are OSErrors
            raise InfrastructureError(
                f"cannot {what}: the Cloud Run API ({self.endpoint}) did not answer ({type(exc).__name__}); "
                "check the network (and $HARNESS_RUN_CLOUD_RUN_ENDPOINT if set), then deploy again",
                retryable=True,
            ) from None


def _message(exc: BaseException) -> str:
    text = getattr(exc, "message", None) or str(exc)
    return " ".join(str(text).split())[:300]


def _forbidden(s: ServiceSettings, what: str, exc: Any) -> str:
    reason = str(getattr(exc, "reason", "") or "")
    text = _message(exc)
    setup = f"harness-run-gcp-setup --project {s.project} --location {s.region}"
    if reason == "SERVICE_DISABLED" or "has not been used" in text or "is disabled" in text:
        return (
            f"cannot {what}: the Cloud Run Admin API is not enabled in project {s.project}; run "
            f"`{setup}` (or `gcloud services enable run.googleapis.com --project {s.project}`)"
        )
    if "iam.serviceaccounts.actAs" in text or "actAs" in text:
        return (
            f"cannot {what}: you may not deploy as {s.service_account} ({text}); grant yourself "
            "roles/iam.serviceAccountUser on it, or run "
            f"`{setup}` to create the server's service account"
        )
    return (
        f"cannot {what}: permission denied ({text}); the deploying identity needs roles/run.admin in "
        f"project {s.project} (and roles/iam.serviceAccountUser on {s.service_account}); see `{setup}`"
    )
