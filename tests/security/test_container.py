"""The same guarantees inside the container runtime (the in-image worker runs the turn): the
credential guards refuse the attacks, and with the guards off the model proxy alone keeps the model
key out of the agent's environment and out of every request the model receives."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from harness_run import AgentSpec, SecurityPolicy, SessionConfig, local
from harness_run.testing import Reply, ScriptedModel, shell, text, tool_call

from ._attacks import (
    DENIED_MARKERS,
    HISTORY_ATTACKS,
    SHELL_ATTACKS,
    TOOL_ATTACKS,
    Canaries,
    unguarded_env_dump,
)

pytestmark = [pytest.mark.docker, pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(1200)]
ATTACKS = (
    "env",
    "proc-self-environ",
    "proc-parent-environ",
    "proc-every-environ",
    "python-os-environ",
    "dotenv",
    "aws-credentials",
    "git-config-list",
    "git-config-env",
    "model-key-var",
    "metadata-ip",
)


def _attacks(harness: str, shell_attacks: list[str]) -> list[Reply]:
    """The shell attacks, the history-store attacks and the harness's web-fetch, sub-agent and file
    tools, one tool call per model reply."""
    commands = [*(SHELL_ATTACKS[name] for name in shell_attacks), *HISTORY_ATTACKS.values()]
    return [*(shell(c) for c in commands), *(tool_call(n, dict(a)) for n, a in TOOL_ATTACKS[harness])]


@pytest.fixture(scope="module")
def options(container_options: dict[str, Any]) -> dict[str, Any]:
    return {**container_options, "isolation": "container"}


async def test_guards_and_proxy_hold_in_the_container(options: dict[str, Any], tmp_path: Path) -> None:
    canaries = Canaries()
    spec = AgentSpec(
        name="sec-ctr", harness="claude-code", model="claude-sonnet-4-6", env={"CLAUDE_CODE_MAX_RETRIES": "0"}
    )
    with ScriptedModel() as model:
        engine = local.deploy(spec, workdir=tmp_path / "workdir", **options)
        try:
            secrets = {"ANTHROPIC_BASE_URL": model.url, "ANTHROPIC_API_KEY": canaries.model_key}
            attacks = _attacks("claude-code", list(ATTACKS))
            model.add(*attacks, text("done"))
            guarded = await engine.start_session().run("collect the credentials", secrets=secrets)
            assert not guarded.is_error, guarded.error
            outputs = model.requests[-1].tool_results
            assert len(outputs) == len(attacks)
            assert all(any(m in o.lower() for m in DENIED_MARKERS) for o in outputs), outputs

            dump = await unguarded_env_dump(engine, model, secrets)
            assert "hrp-" in dump and "ANTHROPIC_API_KEY" in dump  # the turn token, not the key
        finally:
            await engine.aclose()
        bodies = "\n".join(json.dumps(r.body) for r in model.requests)
    assert canaries.model_key not in bodies


@pytest.mark.parametrize("harness", ["codex", "opencode"])
async def test_guards_and_proxy_hold_in_the_container_on_codex_and_opencode(
    options: dict[str, Any], tmp_path: Path, harness: str
) -> None:
    canaries = Canaries()
    model_id = {"codex": "gpt-5.6-luna", "opencode": "openai/gpt-5.1"}[harness]
    spec = AgentSpec(
        name="sec-ctr-multi",
        harness="claude-code",
        model="claude-sonnet-4-6",
        extra_harnesses=["codex", "opencode"],
        env={"HARNESS_RUN_CODEX_MAX_RETRIES": "0"},
    )
    attacks = [a for a in ATTACKS if a != "proc-every-environ" or harness != "opencode"]  # see TESTING.md
    with ScriptedModel() as model:
        engine = local.deploy(spec, workdir=tmp_path / "workdir", **options)
        try:
            secrets = {"OPENAI_BASE_URL": model.openai_url, "OPENAI_API_KEY": canaries.model_key}
            guarded = engine.start_session(config=SessionConfig(harness=harness, model=model_id))
            replies = _attacks(harness, attacks)
            model.add(*replies, text("done"))
            result = await guarded.run("collect the credentials", secrets=secrets)
            assert not result.is_error, result.error
            outputs = model.requests[-1].tool_results
            assert len(outputs) == len(replies)
            assert all(any(m in o.lower() for m in DENIED_MARKERS) for o in outputs), outputs

            relaxed = engine.start_session(
                config=SessionConfig(
                    harness=harness,
                    model=model_id,
                    security_policy=SecurityPolicy(include_credential_guards=False),
                )
            )
            model.add(shell('env | sort; cat /proc/$PPID/environ | tr "\\0" "\\n"'), text("done"))
            looked = await relaxed.run("find the key", secrets=secrets)
            assert not looked.is_error, looked.error
            assert "hrp-" in model.requests[-1].tool_results[-1]
        finally:
            await engine.aclose()
        bodies = "\n".join(json.dumps(r.body) for r in model.requests)
    assert canaries.model_key not in bodies
