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
from harness_run.vocab.gcp import SecretRef

__all__ = [
    "CONFIG_ANNOTATION",
    "DEFAULT_CONCURRENCY",
    "DEFAULT_TIMEOUT",
    "ENV_ENDPOINT",
    "LOCAL_RUNTIMES",
    "ServiceSettings",
    "apply_service",
    "config_sha256",
    "credential_like",
    "local_engine_refusal",
    "on_cloud_run",
    "refuse_local_engines_on_cloud_run",
    "run_client",
    "service_body",
]

ENV_ENDPOINT = "HARNESS_RUN_CLOUD_RUN_ENDPOINT"
"""Another Cloud Run API endpoint (a private one, or a stand-in: ``http://`` means no credentials)."""
CONFIG_ANNOTATION = "harness-run.dev/config-sha256"
DEFAULT_TIMEOUT = 3600
"""Seconds a request may last (Cloud Run's maximum): an SSE stream of a long turn is one request."""
DEFAULT_CONCURRENCY = 250
"""Requests one instance takes at once: the server is one asyncio process and an idle SSE stream costs
little, but each holds a slot for up to ``DEFAULT_TIMEOUT`` (Cloud Run's own default, 80, runs out
with a few dozen watchers)."""
_MAX_TIMEOUT = 3600
_MAX_CONCURRENCY = 1000
_RESERVED_ENV = frozenset({"PORT", "K_SERVICE", "K_REVISION", "K_CONFIGURATION", "HARNESS_RUN_STORE"})
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_CREDENTIAL_NAME = re.compile(r"(API_?KEY|TOKEN|SECRET|PASSWORD|CREDENTIALS?)$|^AWS_SECRET", re.IGNORECASE)
LOCAL_RUNTIMES = frozenset({"local", "container"})
"""Engine runtimes whose agent runs on the server's own host: never served on Cloud Run."""
_SERVICE_NAME = re.compile(r"[a-z]([-a-z0-9]{0,47}[a-z0-9])?")
_GSA = re.compile(r"[a-z0-9][a-z0-9._-]*@[a-z0-9][a-z0-9.-]*\.gserviceaccount\.com")
_T = TypeVar("_T")

Action = Literal["created", "updated", "unchanged"]
Step = Callable[[str, str], None]


@dataclass(frozen=True, kw_only=True, slots=True)
class ServiceSettings:
    """The Cloud Run service of a server: where, which image, as whom, how big.

    Defaults keep one instance always running with its CPU always allocated (turns run after their
    request has been answered, and sessions live in the instance's workspace between turns), an
    explicit one-hour request timeout (SSE streams are long) and ``concurrency`` requests per
    instance (idle SSE streams hold one each), and session affinity. The service is **private**:
    Cloud Run's IAM invoker check stays in front of the server's own API keys, so a caller needs
    ``roles/run.invoker`` and an identity token (``X-Serverless-Authorization``) besides an API key.
    ``public``: anyone may call it (``invoker_iam_disabled``) and the API keys are the only gate.
    ``env``: more non-secret settings of ``harness-run serve`` as environment variables (e.g. the
    sandbox engines' cluster, :meth:`~harness_run.server.SandboxAccess.env`); ``secrets``: variables
    taken from Secret Manager versions when an instance starts (the service holds only the reference).
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
    timeout_seconds: int = DEFAULT_TIMEOUT
    concurrency: int = DEFAULT_CONCURRENCY
    public: bool = False
    port: int = 8080
    env: Mapping[str, str] = field(default_factory=dict[str, str])
    secrets: tuple[SecretRef, ...] = ()

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
        if not 1 <= self.timeout_seconds <= _MAX_TIMEOUT:
            raise UsageError(
                f"--timeout {self.timeout_seconds}: a Cloud Run request timeout is 1 to {_MAX_TIMEOUT} "
                f"seconds (SSE streams reconnect after it; default {DEFAULT_TIMEOUT})"
            )
        if not 1 <= self.concurrency <= _MAX_CONCURRENCY:
            raise UsageError(
                f"--concurrency {self.concurrency}: Cloud Run takes 1 to {_MAX_CONCURRENCY} requests per "
                f"instance (default {DEFAULT_CONCURRENCY}; each open event stream holds one)"
            )
        _check_env(self.env, self.secrets)

    @property
    def parent(self) -> str:
        return f"projects/{self.project}/locations/{self.region}"

    @property
    def name(self) -> str:
        return f"{self.parent}/services/{self.service}"


def _check_env(env: Mapping[str, str], secrets: tuple[SecretRef, ...]) -> None:
    names = [*env, *(ref.env for ref in secrets)]
    for name in names:
        if not _ENV_NAME.fullmatch(name):
            raise UsageError(f"environment variable {name!r}: use letters, digits and '_' (e.g. MY_SETTING)")
        if name in _RESERVED_ENV:
            raise UsageError(
                f"environment variable {name}: set by Cloud Run or by `serve deploy` itself; "
                "pick another name"
            )
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise UsageError(f"{', '.join(twice)} given twice (--env/--secret): give each variable once")


def credential_like(name: str) -> bool:
    """Whether an environment variable's name says it holds a credential (``*_API_KEY``, ``*_TOKEN``...)."""
    return bool(_CREDENTIAL_NAME.search(name))


def on_cloud_run(environ: Mapping[str, str] | None = None) -> bool:
    """Whether this process is a Cloud Run (or Knative) service's: ``K_SERVICE`` is set there."""
    return bool((os.environ if environ is None else environ).get("K_SERVICE"))


def local_engine_refusal(name: str, runtime: str) -> str | None:
    """Why engine ``name`` (of ``runtime``) must not be served on Cloud Run, or None."""
    if runtime not in LOCAL_RUNTIMES:
        return None
    return (
        f"engine {name} is a {runtime} engine: on Cloud Run its agent would run inside the service, as "
        "the service's own identity, with its network (the metadata server) and its credentials (the "
        "store's API keys); deploy it with harness_run.sandbox.deploy(spec, ...) so its turns run in "
        "Agent Sandbox, then deploy the server again"
    )


def refuse_local_engines_on_cloud_run(
    runtimes: Mapping[str, str], environ: Mapping[str, str] | None = None
) -> dict[str, str]:
    """``{engine: why}`` for each engine (name -> runtime; a ``--spec`` is ``"local"``) the server must
    not serve because it runs on Cloud Run (:func:`on_cloud_run`); empty anywhere else."""
    if not on_cloud_run(environ):
        return {}
    refused = {name: local_engine_refusal(name, runtime) for name, runtime in sorted(runtimes.items())}
    return {name: why for name, why in refused.items() if why is not None}


def _run_v2() -> Any:
    """``google.cloud.run_v2``, untyped on purpose: proto-plus messages are dynamic, and a static
    ``from google.cloud import run_v2`` makes pyright resolve ``google.cloud`` past our storage stubs."""
    import importlib

    return importlib.import_module("google.cloud.run_v2")


def service_body(settings: ServiceSettings) -> Any:
    """The ``run_v2.Service`` for ``settings``, with its config hash annotation. The environment holds
    the store's URL, ``settings.env`` and, for each of ``settings.secrets``, a ``secretKeyRef`` (Cloud
    Run reads the version when an instance starts; no value is in the service)."""
    run_v2 = _run_v2()
    from google.protobuf import duration_pb2

    s = settings
    container = run_v2.Container(
        name="server",
        image=s.image,
        ports=[run_v2.ContainerPort(name="http1", container_port=s.port)],
        env=[
            *(
                run_v2.EnvVar(name=name, value=value)
                for name, value in [("HARNESS_RUN_STORE", s.store), *sorted(s.env.items())]
            ),
            *(
                run_v2.EnvVar(
                    name=ref.env,
                    value_source=run_v2.EnvVarSource(
                        secret_key_ref=run_v2.SecretKeySelector(
                            secret=ref.secret if ref.project == s.project else ref.resource,
                            version=ref.version,
                        )
                    ),
                )
                for ref in sorted(s.secrets)
            ),
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
        ingress=run_v2.IngressTraffic.INGRESS_TRAFFIC_ALL,  # reachable; IAM decides who may call
        invoker_iam_disabled=s.public,
        template=run_v2.RevisionTemplate(
            containers=[container],
            service_account=s.service_account,
            scaling=run_v2.RevisionScaling(
                min_instance_count=s.min_instances, max_instance_count=s.max_instances
            ),
            timeout=duration_pb2.Duration(seconds=s.timeout_seconds),
            max_instance_request_concurrency=s.concurrency,
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
    step: Step,
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
        if not settings.public:
            _close_public_bindings(client, settings, call, step)
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
    if not settings.public:
        _close_public_bindings(client, settings, call, step)
    return action, str(done.uri)


_PUBLIC_MEMBERS = ("allUsers", "allAuthenticatedUsers")


def _close_public_bindings(client: Any, settings: ServiceSettings, call: _Caller, step: Step) -> None:
    """A private service has no ``roles/run.invoker`` for ``allUsers``/``allAuthenticatedUsers`` (made
    by hand or by another tool): such a binding is removed, and said."""
    name = settings.name
    policy: Any = call(
        "read the service's IAM policy", lambda: client.get_iam_policy(request={"resource": name})
    )
    opened: list[str] = []
    for binding in policy.bindings:
        if binding.role != "roles/run.invoker":
            continue
        kept = [m for m in binding.members if m not in _PUBLIC_MEMBERS]
        opened += [m for m in binding.members if m in _PUBLIC_MEMBERS]
        del binding.members[:]
        binding.members.extend(kept)
    if not opened:
        return
    call(
        "remove the public invoker binding",
        lambda: client.set_iam_policy(request={"resource": name, "policy": policy}),
    )
    step(
        "cloud run",
        f"removed roles/run.invoker from {' and '.join(opened)}: {settings.service} is private (deploy "
        "with --public to let anyone call it)",
    )


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
