"""The compiled context builds on the real Docker engine from the local mmdebstrap base, and the image
works: ``import harness_run``, every baked harness's ``--version``, no secret values, labels, cache reuse.

Needs the engine and base image of scripts/services + scripts/base-image (``docker_client`` and
``base_image`` fixtures in tests/conftest.py), and the registry proxy's CA in ``$PIP_CERT``.
A cold build takes minutes (apt, ~180 MB of harness CLIs); the timings are printed (``pytest -s``).
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from harness_run import AgentSpec
from harness_run.compiler import BuildPlan, ImageOptions, PodOptions, build_image, compile
from harness_run.harness import get_driver

pytestmark = [
    pytest.mark.docker,
    pytest.mark.integration,
    pytest.mark.slow,
    pytest.mark.timeout(900),
]  # a cold image build

CANARY = "canary-d41d8cd98f00"


@dataclass
class Built:
    plan: BuildPlan
    image_id: str
    seconds: float


def _spec() -> AgentSpec:
    return AgentSpec.from_dict(
        {
            "name": "image-test",
            "harness": "claude-code",
            "model": "claude-sonnet-4-6",
            "extra_harnesses": ["codex", "opencode"],
            "skills": [{"path": "skills/hello"}],
            "mcp_servers": [
                {
                    "name": "search",
                    "url": "https://mcp.example.com",
                    "header_secrets": {"Authorization": "Bearer ${SEARCH_KEY}"},
                }
            ],
            "packages": ["six==1.17.0"],
            "secrets": ["ANTHROPIC_API_KEY"],
            "env": {"LOG_FORMAT": "json"},
        }
    )


@pytest.fixture(scope="module")
def built(docker_client: Any, base_image: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Built]:
    ca = os.environ.get("PIP_CERT")
    if not ca or not Path(ca).is_file():
        pytest.skip("PIP_CERT does not name the registry proxy's CA file; the build cannot reach registries")
    base = tmp_path_factory.mktemp("ctx")
    (base / "skills" / "hello").mkdir(parents=True)
    (base / "skills" / "hello" / "SKILL.md").write_text("---\nname: hello\n---\nSay hello.\n")
    plan = compile(
        _spec(),
        image=ImageOptions(base_image=base_image, ca_files=[ca], build_network="host"),
        pods=PodOptions(runtime_class=None),
        base_dir=base,
    )
    start = time.perf_counter()
    image_id = build_image(plan, client=docker_client)
    seconds = time.perf_counter() - start
    print(f"\ncold-or-cached build of {plan.image}: {seconds:.1f} s")
    yield Built(plan, image_id, seconds)
    # Drop our tag but keep the layers: they are the build cache of the next run.
    docker_client.images.remove(plan.image, noprune=True)


def _run(docker_client: Any, image: str, script: str, labels: dict[str, str]) -> str:
    out = docker_client.containers.run(
        image, ["sh", "-c", script], network_mode="none", labels=labels, remove=True, stderr=True
    )
    return out.decode()


def test_library_imports(built: Built, docker_client: Any, docker_labels: dict[str, str]) -> None:
    out = _run(
        docker_client,
        built.plan.image,
        'python -c "import harness_run, six; print(harness_run.__version__)" '
        "&& harness-run --version && id -u",
        docker_labels,
    )
    from harness_run import __version__

    assert out.split() == [__version__, "harness-run", __version__, "1000"]


@pytest.mark.parametrize(
    ("harness", "command"), [("claude-code", "claude"), ("codex", "codex"), ("opencode", "opencode")]
)
def test_each_harness_in_the_image_is_the_release_the_local_runtime_runs(
    built: Built, docker_client: Any, docker_labels: dict[str, str], harness: str, command: str
) -> None:
    # One version per harness: a spec behaves the same on the local and the container runtimes.
    binary = get_driver(harness).locate()
    env = {"HOME": "/tmp", "PATH": "/usr/bin:/bin"}
    local = subprocess.run([binary, "--version"], capture_output=True, text=True, env=env, check=True)
    image = _run(docker_client, built.plan.image, f"HOME=/tmp {command} --version 2>/dev/null", docker_labels)
    assert image.strip() == local.stdout.strip()


def test_spec_and_config_inside(built: Built, docker_client: Any, docker_labels: dict[str, str]) -> None:
    out = _run(
        docker_client,
        built.plan.image,
        "cat /opt/harness-run/spec.json; echo ===; cat /opt/harness-run/config/claude-code/mcp.json; "
        "echo ===; cat /opt/harness-run/skills/hello/SKILL.md; echo ===; env",
        docker_labels,
    )
    spec_json, mcp_json, skill, env = out.split("===\n")
    assert spec_json.encode() == built.plan.files["spec.json"]
    assert json.loads(spec_json)["mcp_servers"][0]["header_secrets"] == {
        "Authorization": "Bearer ${SEARCH_KEY}"
    }
    assert "${HARNESS_RUN_MCP_SEARCH_AUTHORIZATION}" in mcp_json
    assert CANARY not in out
    assert skill.startswith("---\nname: hello")
    assert f"HARNESS_RUN_DIGEST={built.plan.digest}" in env


def test_labels(built: Built, docker_client: Any) -> None:
    labels = docker_client.images.get(built.plan.image).labels
    assert labels["org.harness-run.digest"] == built.plan.digest
    assert labels["org.harness-run.engine"] == "image-test"
    assert labels["org.harness-run.harnesses"] == "claude-code,codex,opencode"


def test_second_build_is_cached(built: Built, docker_client: Any) -> None:
    lines: list[str] = []
    start = time.perf_counter()
    again = build_image(built.plan, client=docker_client, progress=lines.append)
    seconds = time.perf_counter() - start
    print(f"\nsecond build of {built.plan.image}: {seconds:.1f} s (first: {built.seconds:.1f} s)")
    assert again == built.image_id
    lines = [line.strip() for line in lines if line.strip()]
    work = [
        i
        for i, line in enumerate(lines)
        if line.startswith("Step ") and (" : RUN " in line or " : COPY " in line)
    ]
    assert work, lines
    uncached = [lines[i] for i in work if i + 1 >= len(lines) or "Using cache" not in lines[i + 1]]
    assert not uncached, f"steps rebuilt: {uncached}"
    assert seconds < 60
