"""A Kubernetes client for a GKE cluster looked up through the GKE API, for a process with no
kubeconfig (the team server on Cloud Run): what ``gcloud container clusters get-credentials`` would
write, made in memory.

The cluster's endpoint and CA certificate come from ``GET /v1/projects/P/locations/L/clusters/NAME``
of the GKE API (``container.googleapis.com``, or ``$HARNESS_RUN_GKE_ENDPOINT``), called with
Application Default Credentials (on Cloud Run: the service's account, which needs
``roles/container.developer``); the Kubernetes API is then called with that identity's OAuth access
token, refreshed before it expires.
"""

from __future__ import annotations

import base64
import os
import tempfile
from typing import Any, cast

from harness_run.errors import InfrastructureError, UsageError

__all__ = ["ENV_GKE_ENDPOINT", "gke_api_client"]

ENV_GKE_ENDPOINT = "HARNESS_RUN_GKE_ENDPOINT"
"""Another GKE API endpoint (a private one, or a stand-in)."""
_SCOPES = ["https://www.googleapis.com/auth/cloud-platform"]


def gke_api_client(project: str, location: str, name: str, *, credentials: Any = None) -> Any:
    """A ``kubernetes.client.ApiClient`` for GKE cluster ``name`` in ``project``/``location``, as
    ``credentials`` (default: Application Default Credentials)."""
    try:
        import google.auth
        from google.auth import exceptions as auth_exceptions
        from google.auth.transport.requests import AuthorizedSession, Request
        from kubernetes import client
    except ImportError as exc:
        raise UsageError(
            f"reaching a GKE cluster needs the sandbox extra ({exc}): pip install 'harness-run[sandbox]'"
        ) from None
    creds: Any = credentials
    if creds is None:
        try:
            found = google.auth.default(scopes=_SCOPES)  # pyright: ignore[reportUnknownMemberType, reportUnknownVariableType]
            creds = cast("Any", found[0])
        except auth_exceptions.DefaultCredentialsError:
            raise UsageError(
                f"no kubeconfig and no Google credentials to look up GKE cluster {name!r}: run `gcloud "
                f"container clusters get-credentials {name} --location {location} --project {project}` "
                "(or set KUBECONFIG), or `gcloud auth application-default login`"
            ) from None
    base = (os.environ.get(ENV_GKE_ENDPOINT) or "https://container.googleapis.com").rstrip("/")
    url = f"{base}/v1/projects/{project}/locations/{location}/clusters/{name}"
    try:
        answer = AuthorizedSession(creds).get(url, timeout=30)
    except (OSError, auth_exceptions.GoogleAuthError) as exc:
        raise InfrastructureError(
            f"cannot look up GKE cluster {name!r} at {base} ({type(exc).__name__}); check the network "
            "and the credentials",
            retryable=True,
        ) from None
    if answer.status_code in (403, 404):
        raise UsageError(
            f"GKE cluster {name!r} in project {project!r}, location {location!r}: "
            f"{'not found' if answer.status_code == 404 else 'permission denied'} (GKE API answered "
            f"{answer.status_code}); check the name, and that this identity has roles/container.developer "
            f"(`harness-run-gcp-setup --project {project} --location {location}` grants it to the "
            "server's service account)"
        )
    if answer.status_code != 200:
        raise InfrastructureError(
            f"the GKE API answered {answer.status_code} for cluster {name!r}; try again",
            retryable=answer.status_code == 429 or answer.status_code >= 500,
        )
    data: Any = answer.json()
    endpoint = str(data.get("endpoint") or "")
    auth: Any = data.get("masterAuth") or {}
    ca = str(auth.get("clusterCaCertificate") or "")
    if not endpoint or not ca:
        raise InfrastructureError(
            f"GKE cluster {name!r} has no endpoint or CA certificate yet (still provisioning?)"
        )
    with tempfile.NamedTemporaryFile("wb", prefix="gke-ca-", suffix=".pem", delete=False) as file:
        file.write(base64.b64decode(ca))
    config: Any = client.Configuration()
    config.host = endpoint if endpoint.startswith(("https://", "http://")) else f"https://{endpoint}"
    config.ssl_ca_cert = file.name
    config.api_key_prefix = {"authorization": "Bearer"}
    config.api_key = {"authorization": ""}

    def refresh(configuration: Any) -> None:
        if not creds.valid or not creds.token:
            creds.refresh(Request())
        configuration.api_key["authorization"] = creds.token

    config.refresh_api_key_hook = refresh
    return client.ApiClient(config)
