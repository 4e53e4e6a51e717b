"""Fixtures for the sandbox runtime: a test cluster with real containers, fake GCS, the local registry.

One engine is deployed per module (building its image once); each test starts its own sessions.
The parts: ``ClusterEmulator`` (the Kubernetes API, validating every object against the CRD
schemas) + ``SandboxController`` (a real container of the compiled image per Sandbox, host network,
own port), ``fake-gcs-server`` for the history store, the registry on 127.0.0.1:5000, and the
scripted model on 127.0.0.1 that the real ``claude`` inside the containers talks to.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from harness_run import AgentSpec
from harness_run.testing import Reply, Rule, ScriptedModel

MODEL = "claude-sonnet-4-6"
API_KEY = "scripted-dummy-key"
PROJECT = "test-project"
LOCATION = "us-central1"
CANARY = "canary-sandbox-7f3a9c21e5"
CLUSTER = "hr-test"
GKE_CONTEXT = f"gke_{PROJECT}_{LOCATION}_{CLUSTER}"

# Prompts are matched by substring; every reply after a tool result is the closing text.
RULES = [
    Rule(
        match="attack the worker",
        reply=Reply.shell("id -u; cat /proc/1/environ; head -c 16 /proc/1/mem; kill -9 1"),
    ),
    Rule(match="write the file", reply=Reply.shell("echo hello-from-turn-1 > out.txt")),
    Rule(match="read the file", reply=Reply.shell("cat out.txt")),
    Rule(match="print the token", reply=Reply.shell('echo "token is $MY_TOKEN"')),
    Rule(match="take your time", reply=Reply.shell("sleep 6 && echo slept", delay=0.5)),
    Rule(match="just answer", reply=Reply.text("plain answer")),
    Rule(match="token after a pause", reply=Reply.shell('sleep 4 && echo "token is $MY_TOKEN"')),
    Rule(reply=Reply.text("done"), tool_result=True),
]


def spec() -> AgentSpec:
    return AgentSpec(
        name="sbx",
        harness="claude-code",
        model=MODEL,
        checkpoint=True,
        secrets=[{"name": "MY_TOKEN", "required": False}],
    )


@dataclass
class Deployed:
    """What a module's tests share: the deployed engine's coordinates and the test cluster."""

    engine: Any
    cluster: Any
    controller: Any
    store_url: str
    registry: str
    model: ScriptedModel
    docker_client: Any
    base_image: str
    ca_files: list[str]
    kubeconfig: Path
    deploy_seconds: float

    def secrets(self, **extra: str) -> dict[str, str]:
        return {"ANTHROPIC_BASE_URL": self.model.url, "ANTHROPIC_API_KEY": API_KEY, **extra}

    def get_engine(self, *, version: str | None = None, **claims: Any) -> Any:
        """The engine as an application looks it up; ``claims``: :class:`ClaimOptions` fields."""
        from harness_run import sandbox

        return sandbox.get_engine(
            "sbx",
            project=PROJECT,
            location=LOCATION,
            version=version,
            cluster=sandbox.ClusterTarget(api_client=self.cluster.api_client()),
            claims=sandbox.ClaimOptions(**claims),
            store=self.store_url,
        )

    def deploy(self, spec_: AgentSpec | None = None, *, progress: bool = False, **claims: Any) -> Any:
        from harness_run import sandbox

        return sandbox.deploy(
            spec_ or spec(),
            project=PROJECT,
            location=LOCATION,
            cluster=sandbox.ClusterTarget(api_client=self.cluster.api_client()),
            image=sandbox.ImageOptions(
                base_image=self.base_image,
                ca_files=self.ca_files,
                build_network="host",
                registry=f"{self.registry}/hr-test",
            ),
            pods=sandbox.PodOptions(runtime_class=None),
            claims=sandbox.ClaimOptions(**claims),
            store=self.store_url,
            docker_client=self.docker_client,
            progress=progress,
        )


def write_kubeconfig(path: Path, server: str, contexts: list[str], *, current: str | None = None) -> Path:
    """A kubeconfig whose ``contexts`` (and their cluster entries, named alike) all reach ``server``."""
    import yaml

    doc: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": c, "cluster": {"server": server}} for c in contexts],
        "users": [{"name": "tester", "user": {"token": "test-token"}}],
        "contexts": [{"name": c, "context": {"cluster": c, "user": "tester"}} for c in contexts],
    }
    if current is not None:
        doc["current-context"] = current
    path.write_text(yaml.safe_dump(doc))
    return path


@pytest.fixture(scope="module")
def model() -> Iterator[ScriptedModel]:
    with ScriptedModel(RULES) as scripted:
        yield scripted


@pytest.fixture(scope="module")
def sandbox_spec() -> AgentSpec:
    """The spec the module's ``deployed`` engine runs (a module overrides it to deploy another)."""
    return spec()


@pytest.fixture(scope="module")
def deployed(
    sandbox_spec: AgentSpec,
    docker_client: Any,
    docker_labels: dict[str, str],
    base_image: str,
    registry: str,
    fake_gcs: Any,
    model: ScriptedModel,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Deployed]:
    import time

    from testkit.cluster import ClusterEmulator, SandboxController

    ca = os.environ.get("PIP_CERT")
    if not ca or not Path(ca).is_file():
        pytest.skip("PIP_CERT does not name the registry proxy's CA file; the image build cannot reach PyPI")
    bucket = fake_gcs.create_bucket(f"hr-sbx-{uuid.uuid4().hex[:12]}")
    store_url = f"gs://{bucket}/hr"
    with ClusterEmulator() as cluster:
        controller = SandboxController(
            cluster, docker_client, extra_env=dict(fake_gcs.env), labels=docker_labels
        )
        try:
            # a kubeconfig as `gcloud container clusters get-credentials` names it (other processes
            # look the engine up through it, by cluster name)
            kubeconfig = write_kubeconfig(
                tmp_path_factory.mktemp("kube") / "config", cluster.url, [GKE_CONTEXT], current=GKE_CONTEXT
            )
            d = Deployed(
                engine=None,
                cluster=cluster,
                controller=controller,
                store_url=store_url,
                registry=registry,
                model=model,
                docker_client=docker_client,
                base_image=base_image,
                ca_files=[ca],
                kubeconfig=kubeconfig,
                deploy_seconds=0.0,
            )
            started = time.perf_counter()
            d.engine = d.deploy(sandbox_spec, idle_ttl=60.0, claim_timeout=60.0, progress=True)
            d.deploy_seconds = time.perf_counter() - started
            print(f"\nfirst deploy of {d.engine!r}: {d.deploy_seconds:.1f} s")
            yield d
        finally:
            controller.stop()
