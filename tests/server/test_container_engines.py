"""``harness-run serve`` also serves container engines recorded in its store
(``local.deploy(spec, isolation="container")``): a client of the server runs turns that each run the
real ``claude`` inside the session's own container (host network, the scripted model on 127.0.0.1),
and the containers go when the server stops. Without a Docker engine such an engine is left out with
a log line, and the server still serves the rest."""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

import pytest

import harness_run
from harness_run import AgentSpec, local
from harness_run.events import ToolResultEvent
from harness_run.local import ContainerOptions, ImageOptions
from harness_run.server import ServerPolicy, ServerState
from harness_run.store import SqliteStore
from harness_run.testing import Reply, Rule, ScriptedModel

from ._helpers import MODEL, ServerThread

pytestmark = [pytest.mark.docker, pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(900)]

RULES = [
    Rule(match="write the file", reply=Reply.shell("echo served-in-a-container > out.txt")),
    Rule(match="read the file", reply=Reply.shell("cat out.txt")),
    Rule(reply=Reply.text("done"), tool_result=True),
]
LABEL_SESSION = "harness-run.dev/session"


def _deploy(store_dir: Path, docker_client: Any, base_image: str, labels: dict[str, str]) -> None:
    ca = os.environ.get("PIP_CERT")
    if not ca or not Path(ca).is_file():
        pytest.skip("PIP_CERT does not name the registry proxy's CA file; the image build cannot reach PyPI")
    spec = AgentSpec(name="served-ctr", harness="claude-code", model=MODEL, checkpoint=True)
    engine = local.deploy(
        spec,
        workdir=store_dir,
        isolation="container",
        container=ContainerOptions(
            image=ImageOptions(base_image=base_image, ca_files=[ca]),
            network_mode="host",
            labels=labels,
            docker_client=docker_client,
        ),
    )
    engine.close()


async def test_a_recorded_container_engine_is_served_turns_run_in_its_container(
    tmp_path: Path, docker_client: Any, docker_labels: dict[str, str], base_image: str
) -> None:
    store_dir = tmp_path / "store"
    _deploy(store_dir, docker_client, base_image, docker_labels)
    # the client names the scripted model's endpoint (with its own key): the operator allows it
    allowed = ServerPolicy(allow_endpoints=True)
    with ScriptedModel(RULES) as model, ServerThread(store_dir, [], policy=allowed) as server:
        secrets = {"ANTHROPIC_BASE_URL": model.url, "ANTHROPIC_API_KEY": "scripted-test-key"}
        engine = harness_run.connect(server.url, api_key=server.key)
        assert [v.runtime for v in engine.versions()] == ["container"]
        session = engine.start_session()
        first = await session.run("write the file out.txt", secrets=secrets)
        assert not first.is_error, first.error
        containers = docker_client.containers.list(
            filters={"label": f"{LABEL_SESSION}={session.session_id}"}, ignore_removed=True
        )
        assert len(containers) == 1, "the turn ran in the session's own container"
        second = await session.send("read the file out.txt", secrets=secrets)
        assert not second.is_error, second.error
        outputs = [e.content for e in session.events() if isinstance(e, ToolResultEvent)]
        assert any("served-in-a-container" in o for o in outputs), outputs
        assert session.record.turns == 2
        await engine.aclose()
    left = docker_client.containers.list(
        all=True, filters={"label": f"{LABEL_SESSION}={session.session_id}"}, ignore_removed=True
    )
    assert left == [], "stopping the server removes its containers"


def test_without_docker_a_container_engine_is_left_out_and_the_rest_served(
    tmp_path: Path, docker_client: Any, docker_labels: dict[str, str], base_image: str,
    caplog: pytest.LogCaptureFixture,
) -> None:  # fmt: skip
    import docker

    store_dir = tmp_path / "store"
    _deploy(store_dir, docker_client, base_image, docker_labels)
    dead = docker.DockerClient(base_url=f"unix://{tmp_path}/no-docker.sock", version="1.41", timeout=2)
    store = SqliteStore(store_dir)
    try:
        with caplog.at_level(logging.WARNING, logger="harness_run.server"):
            state = ServerState(
                store,
                store_dir,
                [AgentSpec(name="plain", harness="claude-code", model=MODEL)],
                docker_client=dead,
            )
        assert sorted(state.engines) == ["plain"]
        assert "not serving container engine served-ctr: no Docker engine answers" in caplog.text
    finally:
        store.close()
