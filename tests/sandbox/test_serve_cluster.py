"""How ``harness-run serve`` is told the cluster of the store's sandbox engines (no containers: the
Kubernetes API emulator, kubeconfig files written here, a stand-in GKE API and token endpoint on
127.0.0.1). A turn through a served sandbox engine runs in ``test_telemetry.py``.

Without ``--project``/``--location`` the sandbox engines are skipped with the flags named; half
the flags, or a kubeconfig context of another project, is an error at start-up naming the flags;
with ``--cluster NAME`` and no kubeconfig at all (Cloud Run), the cluster comes from the GKE API."""

from __future__ import annotations

import asyncio
import base64
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from harness_run import AgentSpec
from harness_run.errors import UsageError
from harness_run.runtime.sandbox import SandboxEngine
from harness_run.runtime.sandbox._cluster import ENV_CLUSTER
from harness_run.server import SandboxAccess, ServerState, serve
from harness_run.store import EngineRecord, SqliteStore
from harness_run.vocab import k8s

from .conftest import write_kubeconfig

PROJECT, LOCATION = "my-project", "us-central1"
SPEC = AgentSpec(name="served", harness="claude-code", model="claude-sonnet-4-6")


@pytest.fixture
def cluster() -> Iterator[Any]:
    from testkit.cluster import ClusterEmulator

    with ClusterEmulator() as emulator:
        yield emulator


@pytest.fixture
def home(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """No ambient cluster or Google identity: an empty HOME, no KUBECONFIG, not in a pod."""
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    for name in ("KUBECONFIG", "KUBERNETES_SERVICE_HOST", ENV_CLUSTER, "GOOGLE_APPLICATION_CREDENTIALS"):
        monkeypatch.delenv(name, raising=False)
    return home


@pytest.fixture
def store(tmp_path: Path) -> Iterator[SqliteStore]:
    store = SqliteStore(tmp_path / "store")
    store.put_engine(
        EngineRecord(name="served", version="b" * 64, spec=SPEC.to_dict(), runtime="sandbox", created_at=1.0)
    )
    yield store
    store.close()


def test_serve_names_its_flags_when_the_cluster_is_not_given_or_not_the_one(
    store: SqliteStore, cluster: Any, home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # no flags: the sandbox engine is skipped, and the start-up error says which flags serve it
    with pytest.raises(UsageError) as info:
        asyncio.run(serve(str(store.root), port=0))
    assert "no engine to serve" in str(info.value)
    assert "served is a sandbox engine: pass --project and --location" in str(info.value)
    with pytest.raises(UsageError, match="--location is missing"):
        ServerState(store, store.root, [], sandbox=SandboxAccess(project=PROJECT))
    with pytest.raises(UsageError, match="also pass --project and --location"):
        ServerState(store, store.root, [], sandbox=SandboxAccess(cluster="agents"))

    here, other = f"gke_{PROJECT}_{LOCATION}_agents", "gke_other-project_europe-west1_prod"
    kubeconfig = write_kubeconfig(home / "kube", cluster.url, [here, other], current=other)
    monkeypatch.setenv("KUBECONFIG", str(kubeconfig))
    wrong = SandboxAccess(project=PROJECT, location=LOCATION)  # the current context is elsewhere
    with pytest.raises(UsageError) as info:
        ServerState(store, store.root, [], sandbox=wrong)
    message = str(info.value)
    assert f"(--project {PROJECT} --location {LOCATION} and the current kubeconfig context)" in message
    assert f"'{other}' is GKE cluster 'prod' in project 'other-project'" in message
    assert "pass the matching --project/--location" in message and "--cluster NAME or --context" in message

    access = SandboxAccess.from_env(project=PROJECT, location=LOCATION, cluster="agents", namespace="agents")
    state = ServerState(store, store.root, [], sandbox=access)
    engine = state.engines["served"]
    assert isinstance(engine, SandboxEngine) and engine.namespace == "agents"
    assert engine.kube.server == cluster.url and engine.pool == "served-bbbbbbbbbbbb"
    assert access.env() == {
        "GOOGLE_CLOUD_PROJECT": PROJECT,
        "HARNESS_RUN_LOCATION": LOCATION,
        "HARNESS_RUN_CLUSTER": "agents",
        "HARNESS_RUN_NAMESPACE": "agents",
    }


def _service_account_key(token_uri: str) -> dict[str, str]:
    """A service account key file's content with a fresh RSA key (signs the token request's JWT)."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa

    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    return {
        "type": "service_account",
        "project_id": PROJECT,
        "private_key_id": "k1",
        "private_key": pem.decode(),
        "client_email": f"harness-run-server@{PROJECT}.iam.gserviceaccount.com",
        "client_id": "1",
        "token_uri": token_uri,
    }


class _Google:
    """A stand-in OAuth token endpoint and GKE API on 127.0.0.1; records the requests' auth headers."""

    def __init__(self, cluster_url: str) -> None:
        self.seen: list[tuple[str, str]] = []
        google = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # the token endpoint (a refresh-token grant)
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                self._answer(
                    200, {"access_token": "stand-in-token", "expires_in": 3600, "token_type": "Bearer"}
                )

            def do_GET(self) -> None:
                google.seen.append((self.path, self.headers.get("Authorization", "")))
                if self.path == f"/v1/projects/{PROJECT}/locations/{LOCATION}/clusters/agents":
                    ca = base64.b64encode(b"-----BEGIN CERTIFICATE-----\n-----END CERTIFICATE-----\n")
                    self._answer(
                        200, {"endpoint": cluster_url, "masterAuth": {"clusterCaCertificate": ca.decode()}}
                    )
                else:
                    self._answer(404, {"error": {"code": 404, "message": "not found"}})

            def _answer(self, status: int, body: dict[str, Any]) -> None:
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        threading.Thread(target=self._server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()


def test_without_a_kubeconfig_the_named_cluster_comes_from_the_gke_api(
    store: SqliteStore, cluster: Any, home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What the server does on Cloud Run: ``--cluster NAME``, no kubeconfig, the service account's
    Application Default Credentials (here a service account key whose token endpoint is the stand-in)."""
    google = _Google(cluster.url)
    try:
        adc = home / "adc.json"
        adc.write_text(json.dumps(_service_account_key(f"{google.url}/token")))
        monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(adc))
        monkeypatch.setenv("HARNESS_RUN_GKE_ENDPOINT", google.url)
        with pytest.raises(UsageError, match=r"GKE cluster 'nope' .*not found .*roles/container.developer"):
            ServerState(
                store,
                store.root,
                [],
                sandbox=SandboxAccess(project=PROJECT, location=LOCATION, cluster="nope"),
            )
        state = ServerState(
            store, store.root, [], sandbox=SandboxAccess(project=PROJECT, location=LOCATION, cluster="agents")
        )
        engine = state.engines["served"]
        assert isinstance(engine, SandboxEngine) and engine.kube.server == cluster.url
        assert engine.kube.get(k8s.SANDBOX_WARM_POOL, engine.pool) is None  # the cluster answers
        auth = engine.kube.api.configuration.auth_settings()["BearerToken"]["value"]
        assert auth == "Bearer stand-in-token"
        assert google.seen[-1] == (
            f"/v1/projects/{PROJECT}/locations/{LOCATION}/clusters/agents",
            "Bearer stand-in-token",
        )
    finally:
        google.close()
