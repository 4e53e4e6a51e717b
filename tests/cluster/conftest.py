"""Fixtures for the test-cluster tests: the API emulator, the controller, a tiny 'worker' template.

The echo worker is ``python3 -c`` in the base image: it serves ``/healthz`` on
``$HARNESS_RUN_WORKER_PORT`` and echoes the pod's downward-API annotations file and its env, so the
tests can see what the controller gave the container without the real worker image.
"""

from __future__ import annotations

import json
import os
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from harness_run.vocab import k8s

REPO_ROOT = Path(__file__).resolve().parents[2]
CRDS_DIR = Path(
    os.environ.get("HARNESS_RUN_CRDS_DIR", REPO_ROOT.parent / "shared" / "crds" / "agent-sandbox")
)

G, V = k8s.EXTENSIONS_GROUP, k8s.AGENT_SANDBOX_VERSION

ECHO_WORKER = r"""
import http.server, json, os
PODINFO = "/etc/harness-run/podinfo"
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        if self.path == "/healthz":
            body = b'{"status": "ok"}'
        elif self.path == "/annotations":
            body = open(PODINFO + "/annotations", "rb").read()
        elif self.path == "/env":
            body = json.dumps(dict(os.environ)).encode()
        elif self.path == "/caps":
            body = json.dumps(int(next(l.split()[1] for l in open("/proc/self/status") if l.startswith("CapBnd")), 16)).encode()
        elif self.path == "/whoami":
            body = json.dumps({"uid": os.getuid(), "cwd": os.getcwd(),
                               "workspace_writable": os.access("/workspace", os.W_OK)}).encode()
        else:
            self.send_response(404); self.end_headers(); return
        self.send_response(200); self.end_headers(); self.wfile.write(body)
    def log_message(self, *args): pass
host = os.environ.get("HARNESS_RUN_WORKER_HOST", "127.0.0.1")
http.server.ThreadingHTTPServer((host, int(os.environ["HARNESS_RUN_WORKER_PORT"])), H).serve_forever()
"""


@pytest.fixture(scope="session")
def crds_dir() -> Path:
    if not CRDS_DIR.is_dir():
        pytest.skip(f"Agent Sandbox CRDs not found at {CRDS_DIR} (set HARNESS_RUN_CRDS_DIR)")
    return CRDS_DIR


@pytest.fixture
def cluster(crds_dir: Path) -> Iterator[Any]:
    from testkit.cluster import ClusterEmulator

    with ClusterEmulator(crds_dir=crds_dir) as emulator:
        yield emulator


@pytest.fixture
def custom(cluster: Any) -> Any:
    import kubernetes.client

    return kubernetes.client.CustomObjectsApi(cluster.api_client())


@pytest.fixture
def controller(cluster: Any, docker_client: Any, docker_labels: dict[str, str]) -> Iterator[Any]:
    from testkit.cluster import SandboxController

    ctl = SandboxController(cluster, docker_client, labels=docker_labels, extra_env={"ECHO_EXTRA": "yes"})
    try:
        yield ctl
    finally:
        ctl.stop()
    assert not ctl.errors, ctl.errors


def echo_template(image: str, name: str = "echo") -> dict[str, Any]:
    container = {
        "name": "agent",
        "image": image,
        "command": ["python3", "-c", ECHO_WORKER],
        "env": [{"name": "FROM_TEMPLATE", "value": "1"}],
        "ports": [{"name": "worker", "containerPort": k8s.WORKER_PORT}],
        "readinessProbe": {"httpGet": {"path": "/healthz", "port": "worker"}, "periodSeconds": 1},
    }
    pod = {"metadata": {"annotations": {"from-template": "yes"}}, "spec": {"containers": [container]}}
    return {
        "apiVersion": f"{G}/{V}",
        "kind": "SandboxTemplate",
        "metadata": {"name": name},
        "spec": {"podTemplate": pod},
    }


def warm_pool(name: str, template: str, replicas: int) -> dict[str, Any]:
    return {
        "apiVersion": f"{G}/{V}",
        "kind": "SandboxWarmPool",
        "metadata": {"name": name},
        "spec": {"replicas": replicas, "sandboxTemplateRef": {"name": template}},
    }


def claim(name: str, pool: str, annotations: dict[str, str] | None = None) -> dict[str, Any]:
    return {
        "apiVersion": f"{G}/{V}",
        "kind": "SandboxClaim",
        "metadata": {"name": name},
        "spec": {"warmPoolRef": {"name": pool}, "additionalPodMetadata": {"annotations": annotations or {}}},
    }


def ready(obj: dict[str, Any]) -> bool | None:
    """The Ready condition: True/False, or None when there is none yet."""
    for cond in (obj.get("status") or {}).get("conditions") or []:
        if cond["type"] == "Ready":
            return bool(cond["status"] == "True")
    return None


def wait_for(check: Callable[[], Any], timeout: float = 30.0, what: str = "condition") -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.02)


def wait_pool_ready(custom: Any, name: str, replicas: int, timeout: float = 60.0) -> dict[str, Any]:
    def check() -> dict[str, Any] | None:
        pool = custom.get_namespaced_custom_object(G, V, "default", "sandboxwarmpools", name)
        status = pool.get("status") or {}
        return (
            pool if status.get("replicas") == replicas and status.get("readyReplicas") == replicas else None
        )

    return wait_for(check, timeout, f"pool {name} to have {replicas} ready sandboxes")


def claim_until_ready(
    custom: Any, body: dict[str, Any], timeout: float = 60.0
) -> tuple[float, dict[str, Any]]:
    """Create the claim and watch it until Ready=True; returns (seconds, claim)."""
    import kubernetes.watch

    name = body["metadata"]["name"]
    start = time.perf_counter()
    custom.create_namespaced_custom_object(G, V, "default", "sandboxclaims", body)
    watch = kubernetes.watch.Watch()
    for event in watch.stream(
        custom.list_namespaced_custom_object,
        G,
        V,
        "default",
        "sandboxclaims",
        field_selector=f"metadata.name={name}",
        timeout_seconds=int(timeout),
    ):
        if ready(event["object"]):
            elapsed = time.perf_counter() - start
            watch.stop()
            return elapsed, event["object"]
    raise AssertionError(f"claim {name} not Ready within {timeout}s")


def sandbox(custom: Any, name: str) -> dict[str, Any]:
    return custom.get_namespaced_custom_object(
        k8s.SANDBOX.group, k8s.SANDBOX.version, "default", k8s.SANDBOX.plural, name
    )


def worker_get(custom: Any, sandbox_name: str, path: str) -> bytes:
    port = sandbox(custom, sandbox_name)["metadata"]["annotations"][k8s.ANNOTATION_WORKER_PORT]
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as resp:
        return resp.read()


def worker_json(custom: Any, sandbox_name: str, path: str) -> Any:
    return json.loads(worker_get(custom, sandbox_name, path))
