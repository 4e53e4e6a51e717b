"""``provider="daytona"`` on real parts: the real ``daytona`` SDK against the Daytona API double
(tests/testkit/daytona_double.py: each sandbox a real container of the snapshot's image), the real
``claude`` inside, the scripted model on 127.0.0.1, the image pushed to the local registry."""

from __future__ import annotations

import asyncio
import json
import os
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from testkit.daytona_double import DaytonaDouble

from harness_run.harnessbox import HarnessBox, provider_for
from harness_run.runtime.container import share_store
from harness_run.runtime.daytona import DaytonaProvider
from harness_run.testing import Rule, ScriptedModel, shell, text

pytestmark = [pytest.mark.docker, pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(900)]

CANARY = f"dtn-canary-{uuid.uuid4().hex}"
RULES = [
    Rule(match="write the file", reply=shell("echo kept > note.txt && echo wrote")),
    Rule(match="read the file", reply=shell("cat note.txt")),
    Rule(reply=text("all done"), tool_result=True),
]


@pytest.fixture(scope="module")
def daytona_api(
    docker_client: Any, docker_labels: dict[str, str], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[DaytonaDouble, Path]]:
    store = tmp_path_factory.mktemp("daytona-store")
    share_store(store)
    with DaytonaDouble(
        docker_client, api_key=CANARY, volume_dirs={"hr-store": store}, labels=docker_labels
    ) as api:
        yield api, store


@pytest.fixture
def scripted() -> Iterator[ScriptedModel]:
    with ScriptedModel(RULES) as model:
        yield model


def provider(
    api: DaytonaDouble, store: Path, container_options: dict[str, Any], registry: str
) -> DaytonaProvider:
    made = provider_for("daytona")
    assert isinstance(made, DaytonaProvider)
    made.api_url = api.url
    made.use_api_key(CANARY)  # HarnessBox's secrets["provider_api_key"]
    made.store, made.store_volume, made.registry = str(store), "hr-store", f"{registry}/daytona"
    made.docker_client = container_options["docker_client"]
    made.base_image = container_options["base_image"]
    made.ca_files = tuple(container_options["ca_files"])
    made.labels = dict(container_options["labels"])
    made.idle_ttl = 0.5
    made.agent_netns = "shared"  # the double's containers share the host's network namespace
    return made


@pytest.mark.harness
async def test_a_streamed_turn_then_idle_stop_start_with_the_workspace_then_kill_deletes(
    daytona_api: tuple[DaytonaDouble, Path],
    scripted: ScriptedModel,
    container_options: dict[str, Any],
    registry: str,
    docker_client: Any,
) -> None:
    api, store = daytona_api
    hb = HarnessBox(
        provider=provider(api, store, container_options, registry),
        harness="claude-code",
        secrets={"harness_secrets": {"ANTHROPIC_BASE_URL": scripted.url, "ANTHROPIC_API_KEY": "dummy"}},
    )
    session = await hb.create_session()
    events = [e async for e in session.send_message("Please write the file")]
    assert events[-1].type == "result" and not events[-1].event.result.is_error  # type: ignore[union-attr]
    engine: Any = hb.engine
    assert engine.runtime == "daytona"
    [box] = api.live()
    assert box.state == "started" and box.labels["harness-run.dev/session"] == session.session_id
    # idle: the sandbox is stopped (not deleted); the next message starts it again, workspace intact
    for _ in range(100):
        if engine.claims.stopped:
            break
        await asyncio.sleep(0.1)
    assert box.state == "stopped" and engine.claims.stopped == [box.id]
    assert docker_client.containers.get(box.container).status == "exited"
    again = [e async for e in session.send_message("Now read the file")]
    assert not again[-1].event.result.is_error  # type: ignore[union-attr]
    assert any("kept" in str(e.event) for e in again if e.type == "tool_result")  # the agent read it back
    assert [b.id for b in api.live()] == [box.id] and box.state == "started"
    # the Daytona key reached the SDK only: not the sandbox's env, processes or files, nor the history
    container = docker_client.containers.get(box.container)
    assert CANARY not in json.dumps(container.attrs)
    found = container.exec_run(
        ["sh", "-c", f"grep -rl {CANARY} /proc/*/environ /home /workspace /tmp 2>/dev/null; true"]
    )
    assert CANARY not in found.output.decode()
    assert CANARY not in "".join(
        p.read_text(errors="replace")
        for p in store.rglob("*")
        if p.is_file() and p.stat().st_size < 5_000_000
    )
    assert ("POST", "/sandbox") in api.requests and ("POST", "/sandbox/" + box.id + "/start") in api.requests
    # kill: the sandbox is deleted
    await hb.kill()
    assert api.live() == [] and box.state == "destroyed"
    assert not [c for c in docker_client.containers.list(all=True) if c.name == box.container]
    assert os.environ.get("DAYTONA_API_KEY") != CANARY


@pytest.mark.cloud
@pytest.mark.harness
async def test_a_turn_on_real_daytona_then_stop_start_then_kill() -> None:
    """Live: DAYTONA_API_KEY (+ DAYTONA_API_URL), HARNESS_RUN_STORE (a gs:// store the sandboxes reach,
    its credentials in HARNESS_RUN_DAYTONA_ENV as JSON) and ANTHROPIC_API_KEY; Daytona builds the
    compiled context itself (no registry)."""
    missing = [
        n for n in ("DAYTONA_API_KEY", "HARNESS_RUN_STORE", "ANTHROPIC_API_KEY") if not os.environ.get(n)
    ]
    assert not missing, f"the live Daytona test needs {missing}"
    made = DaytonaProvider(env=json.loads(os.environ.get("HARNESS_RUN_DAYTONA_ENV") or "{}"), idle_ttl=5)
    hb = HarnessBox(
        provider=made,
        harness="claude-code",
        secrets={"harness_secrets": {"ANTHROPIC_API_KEY": os.environ["ANTHROPIC_API_KEY"]}},
    )
    session = await hb.create_session()
    first = await session.send_message("Write 'kept' to note.txt, then say done", stream=False)
    assert not first.is_error, first.error
    engine: Any = hb.engine
    for _ in range(120):
        if engine.claims.stopped:
            break
        await asyncio.sleep(1)
    assert engine.claims.stopped
    out = await session.run_command("cat note.txt")
    assert "kept" in out.stdout
    await hb.kill()
