"""Opt-in: the seed README's remote flow on a real GKE cluster (marker ``cloud``, deselected by default).

Run with ``HARNESS_RUN_CLOUD_TESTS=1 HARNESS_RUN_LIVE_PROJECT=<project>`` (optionally
``HARNESS_RUN_LIVE_LOCATION``, default us-central1) after ``harness-run-gcp-setup --project <project>``,
with the cluster as the current kubectl context, docker logged in to Artifact Registry and Application
Default Credentials. With no ``ANTHROPIC_API_KEY`` in the environment the turn uses Vertex AI, as the
README promises. It deploys an engine named ``hr-live-<id>``, runs two turns (the second from a fresh
engine object, as another process would), and deletes the version afterwards.
"""

from __future__ import annotations

import os
import uuid

import pytest

from harness_run import AgentSpec

pytestmark = pytest.mark.cloud


async def test_deploy_run_reattach_send_on_a_real_cluster() -> None:
    project = os.environ.get("HARNESS_RUN_LIVE_PROJECT")
    if not project:
        pytest.skip("set HARNESS_RUN_LIVE_PROJECT (and a kubectl context, ADC) for the live sandbox test")
    location = os.environ.get("HARNESS_RUN_LIVE_LOCATION", "us-central1")
    from harness_run import sandbox

    spec = AgentSpec(
        name=f"hr-live-{uuid.uuid4().hex[:8]}",
        harness="claude-code",
        model="claude-sonnet-4-6",
        checkpoint=True,
    )
    secrets = (
        {"ANTHROPIC_API_KEY": os.environ["ANTHROPIC_API_KEY"]} if "ANTHROPIC_API_KEY" in os.environ else {}
    )
    engine = sandbox.deploy(spec, project=project, location=location, warm_pool=True)
    try:
        session = engine.start_session()
        first = await session.run("Write hello.txt containing 'hi', then say done.", secrets=secrets)
        assert not first.is_error, first.error
        again = sandbox.get_engine(spec.name, project=project, location=location)
        second = await again.get_session(session.session_id).send("What is in hello.txt?", secrets=secrets)
        assert not second.is_error, second.error
        assert "hi" in second.text
        await again.aclose()
    finally:
        await engine.aclose()
        engine.delete_version(engine.version)
