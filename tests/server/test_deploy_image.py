"""``harness-run serve deploy`` end to end, through the real CLI: the server image really builds on our
dockerd, is pushed to the local registry (127.0.0.1:5000), and the Cloud Run service is created through
the real ``google-cloud-run`` client against the stand-in API (``HARNESS_RUN_CLOUD_RUN_ENDPOINT``).
The service is private, takes its model key from Secret Manager, and serves the store's sandbox
engine. A second deploy builds, pushes and sends nothing; ``--public`` updates without a build; a
local engine in the store is refused. The pushed image, run as a plain ``harness-run serve`` would
run it (``$PORT``, ``$HARNESS_RUN_STORE`` on fake GCS), answers ``/healthz``, serves a local engine
recorded there with an API key made on the same bucket, and runs a real turn (its own ``claude``
against the scripted model on 127.0.0.1).
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from testkit.cloudrun import CloudRunStandIn

import harness_run
from harness_run import AgentSpec
from harness_run.store import EngineRecord, open_store
from harness_run.testing import ScriptedModel, text
from harness_run.vocab.net import free_port

from ._helpers import MODEL, cli

pytestmark = [pytest.mark.docker, pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(1500)]

CANARY = "canary-deploy-3b9f0c7e21"


def _spec() -> AgentSpec:
    return AgentSpec(name="team-sbx", harness="claude-code", model=MODEL)


@pytest.fixture
def api() -> Iterator[CloudRunStandIn]:
    with CloudRunStandIn(forbidden=(CANARY,)) as stand_in:
        yield stand_in


def _deploy(
    api: CloudRunStandIn, store: str, registry: str, base_image: str, *more: str
) -> subprocess.CompletedProcess[str]:
    ca = os.environ.get("PIP_CERT", "")
    args = [
        sys.executable, "-m", "harness_run", "serve", "deploy",
        "--project", "test-project", "--region", "us-central1", "--service", "team",
        "--store", store, "--registry", registry, "--harness", "claude-code", *more,
        "--secret", "ANTHROPIC_API_KEY=projects/test-project/secrets/anthropic:latest",
        "--base-image", base_image, "--build-network", "host", "--cluster", "agents",
        *(["--ca-file", ca] if ca and Path(ca).is_file() else []),
    ]  # fmt: skip
    env = {**os.environ, "HARNESS_RUN_CLOUD_RUN_ENDPOINT": api.url, "ANTHROPIC_API_KEY": CANARY}
    return subprocess.run(args, capture_output=True, text=True, env=env, timeout=1200, check=False)


def _get(url: str, key: str | None = None) -> tuple[int, Any]:
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=10) as answer:
            return answer.status, json.loads(answer.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


async def test_deploy_builds_pushes_creates_then_does_nothing_then_updates_and_the_image_serves(
    api: CloudRunStandIn,
    scripted_model: ScriptedModel,
    gcs_store_url: str,
    fake_gcs: Any,
    registry: str,
    base_image: str,
    docker_client: Any,
    docker_labels: dict[str, str],
    tmp_path: Path,
) -> None:
    repo = f"{registry}/hr-test-server-{uuid.uuid4().hex[:8]}"  # a fresh repository: the first deploy builds
    history = open_store(gcs_store_url)  # a sandbox engine deployed there: the service is told its cluster
    history.put_engine(
        EngineRecord(
            name="team-sbx", version="c" * 64, spec=_spec().to_dict(), runtime="sandbox", created_at=1.0
        )
    )
    history.close()

    first = _deploy(api, gcs_store_url, repo, base_image)
    assert first.returncode == 0, first.stderr[-3000:]
    assert "building " in first.stderr and f"{repo}/harness-run-server:" in first.stderr
    assert "pushed" in first.stderr
    assert "none in gs://" in first.stderr, "it says there is no API key yet"
    url = first.stdout.strip().splitlines()[-1]
    assert url.startswith("harness-run server created: https://team-")
    assert api.refusals == []
    (create,) = api.writes()
    assert create.method == "POST" and create.body is not None
    image = create.body["template"]["containers"][0]["image"]
    assert image.startswith(f"{repo}/harness-run-server:")
    docker_client.api.inspect_distribution(image)  # it is in the registry
    env = create.body["template"]["containers"][0]["env"]
    assert env == [
        {"name": "HARNESS_RUN_STORE", "value": gcs_store_url},
        {"name": "GOOGLE_CLOUD_PROJECT", "value": "test-project"},
        {"name": "HARNESS_RUN_CLUSTER", "value": "agents"},
        {"name": "HARNESS_RUN_LOCATION", "value": "us-central1"},
        {
            "name": "ANTHROPIC_API_KEY",
            "valueSource": {"secretKeyRef": {"secret": "anthropic", "version": "latest"}},
        },
    ]
    assert "invokerIamDisabled" not in create.body
    assert "private: callers need roles/run.invoker on team" in first.stderr
    assert "sandbox engines team-sbx from gs://" in first.stderr
    assert "claiming on project test-project, location us-central1, cluster agents" in first.stderr

    again = _deploy(api, gcs_store_url, repo, base_image)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "already in the registry: nothing to build or push" in again.stderr
    assert "building " not in again.stderr
    assert "up to date: nothing sent" in again.stderr
    assert again.stdout.strip().splitlines()[-1].startswith("harness-run server unchanged: https://team-")
    assert len(api.writes()) == 1, "no update sent"

    public = _deploy(api, gcs_store_url, repo, base_image, "--public", "--concurrency", "40")
    assert public.returncode == 0, public.stderr[-3000:]
    assert "building " not in public.stderr, "same image: only the service changes"
    assert "PUBLIC: anyone on the internet can call team; the server's API keys are the only gate" in (
        public.stderr
    )
    update = api.writes()[-1]
    assert update.method == "PATCH" and update.body is not None
    assert update.body["invokerIamDisabled"] is True
    assert update.body["template"]["maxInstanceRequestConcurrency"] == 40
    new_image = update.body["template"]["containers"][0]["image"]
    assert new_image == image
    assert CANARY not in first.stderr + again.stderr + public.stderr + str(api.requests)

    history = open_store(gcs_store_url)  # a local engine: served by a plain `serve`, never on Cloud Run
    local = AgentSpec(name="team-agent", harness="claude-code", model=MODEL, env={"LOG_LEVEL": "debug"})
    history.put_engine(
        EngineRecord(
            name="team-agent", version="d" * 64, spec=local.to_dict(), runtime="local", created_at=2.0
        )
    )
    history.close()
    refused = _deploy(api, gcs_store_url, repo, base_image)
    assert refused.returncode == 2 and "engine team-agent is a local engine" in refused.stderr
    assert "building " not in refused.stderr

    # the image as a plain server (no $K_SERVICE): $PORT and $HARNESS_RUN_STORE (fake GCS, host network)
    server_secret = {"HARNESS_RUN_SERVER_SECRET": uuid.uuid4().hex * 2}  # Secret Manager's, on Cloud Run
    made = cli(
        "serve", "keys", "create", "--name", "deployed", "--scope", "admin", "--store", gcs_store_url,
        env=server_secret,
    )  # fmt: skip
    key = made.stdout.split()[-1]
    port = free_port()
    container = docker_client.containers.run(
        new_image,
        detach=True,
        network_mode="host",
        command=[
            "sh",
            "-c",
            'exec harness-run serve --host 0.0.0.0 --port "$PORT" --store "$HARNESS_RUN_STORE" '
            "--engine team-agent --allow-endpoints "  # the scripted model: the caller's own endpoint
            "--agent-uids off",  # the image's server is uid 1000: it cannot give agents a uid each
        ],
        environment={"PORT": str(port), "HARNESS_RUN_STORE": gcs_store_url, **fake_gcs.env, **server_secret},
        labels=docker_labels,
    )
    try:
        deadline = time.monotonic() + 90
        status: int | None = None
        health: Any = None
        while time.monotonic() < deadline:
            try:
                status, health = _get(f"http://127.0.0.1:{port}/healthz")
                break
            except (urllib.error.URLError, ConnectionError):
                container.reload()
                assert container.status in ("created", "running"), container.logs().decode()[-2000:]
                await asyncio.sleep(0.5)
        assert status == 200, container.logs().decode()[-2000:]
        assert health["status"] == "ok"
        assert _get(f"http://127.0.0.1:{port}/v1/engines")[0] == 401
        status, engines = _get(f"http://127.0.0.1:{port}/v1/engines", key)
        assert status == 200 and [e["name"] for e in engines["engines"]] == ["team-agent"]
        assert engines["engines"][0]["spec"]["env"] == {"LOG_LEVEL": "debug"}

        # a real turn: the image's own claude, run by the served engine, against the scripted model
        scripted_model.add(text("served from the image"))
        engine = harness_run.connect(f"http://127.0.0.1:{port}", api_key=key)
        session = engine.start_session()
        secrets = {"ANTHROPIC_BASE_URL": scripted_model.url, "ANTHROPIC_API_KEY": "scripted-test-key"}
        result = await session.run("hello", secrets=secrets)
        assert not result.is_error, (result.error, container.logs().decode()[-2000:])
        assert result.text == "served from the image"
        await engine.aclose()
    finally:
        container.remove(force=True)
