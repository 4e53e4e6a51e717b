"""``compile_server``: the team server's image through the compiler's deterministic path — the same
bytes and digest in any directory, a digest that follows what reaches the image (specs, harnesses,
base image) and nothing else (registry, the store), the command the image runs, refused input."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness_run import AgentSpec
from harness_run.compiler import ImageOptions, compile, compile_server
from harness_run.errors import UsageError


def _spec(name: str = "team", **extra: object) -> AgentSpec:
    return AgentSpec.from_dict(
        {"name": name, "harness": "claude-code", "model": "claude-sonnet-4-6", **extra}
    )


def test_same_inputs_same_bytes_in_any_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    first = compile_server(specs=[_spec()])
    monkeypatch.chdir(tmp_path)
    second = compile_server(specs=[_spec()])
    assert first.digest == second.digest
    assert first.context_tar() == second.context_tar()
    assert first.image == f"harness-run/harness-run-server:{first.digest[:12]}"
    assert first.manifests == ()


def test_what_reaches_the_image_changes_the_digest_and_nothing_else_does() -> None:
    base = compile_server(specs=[_spec()])
    assert compile_server(specs=[_spec(env={"LOG": "1"})]).digest != base.digest
    assert compile_server(specs=[_spec()], harnesses=["codex"]).digest != base.digest
    assert (
        compile_server(specs=[_spec()], image=ImageOptions(base_image="debian:trixie")).digest != base.digest
    )
    moved = compile_server(specs=[_spec()], image=ImageOptions(registry="127.0.0.1:5000/team"))
    assert (
        moved.digest == base.digest and moved.image == f"127.0.0.1:5000/team/harness-run-server:{base.short}"
    )
    assert base.digest != compile(_spec()).digest, "not the agent image"


def test_the_image_serves_its_specs_on_port_from_the_environment() -> None:
    plan = compile_server(specs=[_spec("b-agent"), _spec("a-agent", harness="codex", model="gpt-5")])
    assert plan.harnesses == ("claude-code", "codex")
    dockerfile = plan.dockerfile
    cmd = json.loads(dockerfile.rsplit("CMD ", 1)[1])
    assert cmd[:2] == ["sh", "-c"]
    assert cmd[2].startswith(
        'exec harness-run serve --host 0.0.0.0 --port "${PORT:-8080}" --serve-recorded --store "${HARNESS_RUN_STORE:?'
    )
    assert cmd[2].endswith(
        "--spec /opt/harness-run/specs/a-agent.json --spec /opt/harness-run/specs/b-agent.json"
    )
    assert json.loads(plan.files["specs/a-agent.json"])["harness"] == "codex"
    assert "npm install --global --prefer-online @openai/codex@" in dockerfile
    assert "claude-agent-sdk==" in dockerfile
    assert "USER 1000:1000" in dockerfile
    assert 'org.harness-run.engine="harness-run-server"' in dockerfile
    # the shared layers come in the agent image's order, so both images reuse one build cache
    agent = compile(_spec()).dockerfile
    shared = agent[agent.index("FROM ") : agent.index("RUN python -m compileall")]
    assert shared in compile_server(specs=[_spec()]).dockerfile


def test_without_specs_or_harnesses_it_installs_claude_code() -> None:
    plan = compile_server()
    assert plan.harnesses == ("claude-code",)
    assert "--spec" not in plan.dockerfile and "COPY specs/" not in plan.dockerfile


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"specs": [_spec(), _spec()]}, "two specs share a name"),
        ({"harnesses": ["vim"]}, "unknown harness"),
        ({"specs": [_spec(skills=[{"path": "skills/x"}])]}, "local skills"),
    ],
)
def test_refused_input_names_the_fix(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(UsageError, match=message):
        compile_server(**kwargs)  # pyright: ignore[reportArgumentType]
