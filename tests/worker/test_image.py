"""The compiled image runs the worker as its command: a container (host network, a bind-mounted SQLite
store) answers /healthz and runs a real Claude Code turn against the scripted model, reached through
WorkerClient. Prints the container's cold start (start -> /healthz 200)."""

from __future__ import annotations

import os
import time
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from harness_run import AgentSpec
from harness_run.compiler import ImageOptions, PodOptions, build_image, compile
from harness_run.runtime.worker_client import TurnRequest, WorkerClient
from harness_run.testing import ScriptedModel, shell, text

from .conftest import MODEL, TOKEN, TOKEN_SHA256, free_port, model_secrets, new_session

pytestmark = [
    pytest.mark.docker,
    pytest.mark.integration,
    pytest.mark.slow,
    pytest.mark.harness,
    pytest.mark.timeout(900),
]

SPEC = AgentSpec(
    name="wk",
    harness="claude-code",
    model=MODEL,
    env={"CLAUDE_CODE_MAX_RETRIES": "0"},
    skills=[{"path": "skills/hello"}],
    packages=["six==1.17.0"],
)


@pytest.fixture(scope="module")
def image(docker_client: Any, base_image: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    ca = os.environ.get("PIP_CERT")
    if not ca or not Path(ca).is_file():
        pytest.skip("PIP_CERT does not name the registry proxy's CA file; the build cannot reach registries")
    base = tmp_path_factory.mktemp("ctx")
    (base / "skills" / "hello").mkdir(parents=True)
    (base / "skills" / "hello" / "SKILL.md").write_text("---\nname: hello\n---\nSay hello.\n")
    plan = compile(
        SPEC,
        image=ImageOptions(base_image=base_image, ca_files=[ca], build_network="host"),
        pods=PodOptions(runtime_class=None),
        base_dir=base,
    )
    started = time.perf_counter()
    build_image(plan, client=docker_client)
    print(f"\nbuild of {plan.image}: {time.perf_counter() - started:.1f} s")
    yield plan.image
    docker_client.images.remove(plan.image, noprune=True)


def _healthy(url: str, container: Any, within: float = 60.0) -> float:
    started = time.monotonic()
    while time.monotonic() - started < within:
        try:
            with urllib.request.urlopen(f"{url}/healthz", timeout=1) as resp:
                if resp.status == 200:
                    return time.monotonic() - started
        except OSError:
            container.reload()
            if container.status == "exited":
                pytest.fail(f"the worker container exited:\n{container.logs().decode()[-3000:]}")
        time.sleep(0.02)
    pytest.fail(f"no /healthz within {within} s:\n{container.logs().decode()[-3000:]}")


async def test_the_image_serves_a_turn(
    image: str, docker_client: Any, docker_labels: dict[str, str], tmp_path: Path
) -> None:
    store = tmp_path / "store"
    store.mkdir()
    store.chmod(0o777)  # the worker runs as uid 1000
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    started = time.monotonic()
    container = docker_client.containers.run(
        image,
        detach=True,
        network_mode="host",
        environment={
            "HARNESS_RUN_WORKER_HOST": "127.0.0.1",
            "HARNESS_RUN_WORKER_PORT": str(port),
            "HARNESS_RUN_WORKER_TOKEN_SHA256": TOKEN_SHA256,
            "HARNESS_RUN_STORE": "/store",
        },
        volumes={str(store): {"bind": "/store", "mode": "rw"}},
        labels=docker_labels,
    )
    try:
        ready = _healthy(url, container)
        print(
            f"\ncontainer start -> /healthz 200: {time.monotonic() - started:.2f} s ({ready:.2f} s polling)"
        )
        with ScriptedModel([shell("printf 'in the image' > made.txt"), text("done in the image")]) as model:
            sid = new_session(str(store), SPEC)
            async with WorkerClient(url, TOKEN) as client:
                health = await client.health()
                assert health.digest is not None and len(health.digest) == 64
                request = TurnRequest(
                    turn_id=uuid.uuid4().hex,
                    session_id=sid,
                    prompt="make a file",
                    secrets=model_secrets(model),
                )
                info = await client.start_turn(request)
                t0 = time.monotonic()
                events = [e async for e in client.events(info.turn_id)]
                print(f"turn through the containerised worker: {time.monotonic() - t0:.2f} s")
                made = await client.exec(sid, "cat made.txt; id -u")
                # the image's own copies: the skill staged where Claude Code looks, the packages installed
                baked = await client.exec(
                    sid,
                    "head -2 .claude/skills/hello/SKILL.md; python -c 'import six; print(six.__version__)'",
                )
        result = events[-1]["result"]
        assert not result["is_error"], result
        assert result["text"] == "done in the image"
        assert made.stdout == "in the image1000\n"
        assert baked.stdout == "---\nname: hello\n1.17.0\n", baked
        from harness_run.store import open_store

        history = open_store(str(store))
        try:
            [turn] = history.list_turns(sid)
            assert turn.result is not None and turn.result.text == "done in the image"
            assert [e.type for e in history.read_events(sid)][-1] == "result"
        finally:
            history.close()
        container.stop(timeout=20)  # SIGTERM: the worker exits 0
        assert container.wait(timeout=30)["StatusCode"] == 0
    finally:
        container.remove(force=True)
