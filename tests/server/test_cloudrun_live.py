"""Opt-in: ``harness-run serve deploy`` to real Cloud Run (marker ``cloud``, deselected by default).

Run with ``HARNESS_RUN_CLOUD_TESTS=1 HARNESS_RUN_LIVE_PROJECT=<project>`` (optionally
``HARNESS_RUN_LIVE_LOCATION``, default us-central1) after ``harness-run-gcp-setup --project <project>``,
with docker logged in to Artifact Registry and Application Default Credentials that may deploy to
Cloud Run as ``harness-run-server@<project>.iam.gserviceaccount.com``. It deploys a service named
``hr-live-<id>`` serving one spec over ``gs://<project>-harness-run/hr-live-<id>``, checks ``/healthz``
over HTTPS and an API key, redeploys (nothing sent) and deletes the service afterwards.
"""

from __future__ import annotations

import json
import os
import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path
from typing import Any

import pytest

from harness_run import AgentSpec

pytestmark = pytest.mark.cloud


def _get(url: str, key: str | None = None) -> tuple[int, Any]:
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=30) as answer:
            return answer.status, json.loads(answer.read())
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def test_deploy_serve_redeploy_on_real_cloud_run(tmp_path: Path) -> None:
    project = os.environ.get("HARNESS_RUN_LIVE_PROJECT")
    if not project:
        pytest.skip("set HARNESS_RUN_LIVE_PROJECT (and ADC, docker auth) for the live Cloud Run test")
    region = os.environ.get("HARNESS_RUN_LIVE_LOCATION", "us-central1")
    from harness_run.server import create_key, deploy_server, key_store, run_client
    from harness_run.store import open_store

    name = f"hr-live-{uuid.uuid4().hex[:8]}"
    store_url = f"gs://{project}-harness-run/{name}"
    spec = AgentSpec(name="live-agent", harness="claude-code", model="claude-sonnet-4-6", checkpoint=True)
    store = open_store(store_url)
    _, key = create_key(key_store(store), "live-test")
    store.close()
    client = run_client()
    try:
        done = deploy_server(project=project, region=region, store=store_url, service=name, specs=[spec])
        assert done.action == "created" and done.url.startswith("https://")
        deadline = time.monotonic() + 300
        status, health = _get(f"{done.url}/healthz")
        while status != 200 and time.monotonic() < deadline:
            time.sleep(5)
            status, health = _get(f"{done.url}/healthz")
        assert status == 200 and health["engines"] == ["live-agent"]
        assert _get(f"{done.url}/v1/engines")[0] == 401
        assert _get(f"{done.url}/v1/engines", key)[0] == 200
        again = deploy_server(project=project, region=region, store=store_url, service=name, specs=[spec])
        assert again.action == "unchanged" and not again.built
    finally:
        client.delete_service(name=f"projects/{project}/locations/{region}/services/{name}").result(
            timeout=600
        )
