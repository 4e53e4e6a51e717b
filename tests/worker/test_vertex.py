"""Claude on Vertex AI without keys (issue 5 item 6): the pure env rule, and what the worker actually
hands the Claude Code process (a stand-in ``claude`` records its environment: the real one would call
Vertex AI, which these tests cannot reach)."""

from __future__ import annotations

import json
import stat
import uuid
from pathlib import Path

import pytest

from harness_run.runtime.worker_client import TurnRequest, WorkerClient
from harness_run.worker import vertex_env

from .conftest import TOKEN, WorkerFactory, new_session

POD = {"HARNESS_RUN_VERTEX_PROJECT": "my-project"}
VERTEX = {
    "CLAUDE_CODE_USE_VERTEX": "1",
    "ANTHROPIC_VERTEX_PROJECT_ID": "my-project",
    "CLOUD_ML_REGION": "global",
}


def test_vertex_mode_from_the_pod_env() -> None:
    assert vertex_env(POD, harness="claude-code", secrets={}) == VERTEX
    regional = {**POD, "HARNESS_RUN_VERTEX_REGION": "us-east5"}
    assert vertex_env(regional, harness="claude-code", secrets={})["CLOUD_ML_REGION"] == "us-east5"
    assert vertex_env({**POD, "HARNESS_RUN_VERTEX_REGION": " "}, harness="claude-code", secrets={}) == VERTEX


def test_the_region_is_global_unless_the_spec_names_one() -> None:
    """Claude's Vertex AI docs use ``global``; the deploy location (where the cluster runs) is not
    a model region. The spec's ``env["CLOUD_ML_REGION"]`` names one, ahead of the pod's setting."""
    assert vertex_env(POD, harness="claude-code", secrets={}, spec_env={})["CLOUD_ML_REGION"] == "global"
    named = {"CLOUD_ML_REGION": "us-east5"}
    assert vertex_env(POD, harness="claude-code", secrets={}, spec_env=named)["CLOUD_ML_REGION"] == "us-east5"
    regional_pod = {**POD, "HARNESS_RUN_VERTEX_REGION": "europe-west1"}
    env = vertex_env(regional_pod, harness="claude-code", secrets={}, spec_env=named)
    assert env["CLOUD_ML_REGION"] == "us-east5"


@pytest.mark.parametrize(
    ("pod", "harness", "secrets", "base_url"),
    [
        ({}, "claude-code", {}, None),  # no project: nothing
        ({"HARNESS_RUN_VERTEX_PROJECT": " "}, "claude-code", {}, None),
        (POD, "codex", {}, None),  # not Claude Code
        (POD, "opencode", {}, None),
        (POD, "claude-code", {"ANTHROPIC_API_KEY": "k"}, None),  # a key passed per run wins
        (POD, "claude-code", {"ANTHROPIC_AUTH_TOKEN": "t"}, None),
        (POD, "claude-code", {"CLAUDE_CODE_OAUTH_TOKEN": "t"}, None),
        (POD, "claude-code", {"ANTHROPIC_BASE_URL": "http://127.0.0.1:1"}, None),  # an endpoint wins
        (POD, "claude-code", {"OPENROUTER_API_KEY": "k"}, None),
        (POD, "claude-code", {"CLAUDE_CODE_USE_VERTEX": "0"}, None),  # the caller decided
        (POD, "claude-code", {}, "http://gateway.internal"),  # the spec's model_base_url wins
        ({**POD, "ANTHROPIC_API_KEY": "k"}, "claude-code", {}, None),  # a key in the pod env
    ],
)
def test_no_vertex_mode(
    pod: dict[str, str], harness: str, secrets: dict[str, str], base_url: str | None
) -> None:
    assert vertex_env(pod, harness=harness, secrets=secrets, model_base_url=base_url) == {}


def test_an_empty_key_does_not_count() -> None:
    assert vertex_env(POD, harness="claude-code", secrets={"ANTHROPIC_API_KEY": ""}) == VERTEX


def _recording_claude(tmp_path: Path) -> tuple[Path, Path]:
    """A ``claude`` that records the provider variables it got and answers with one result line."""
    dump = tmp_path / "claude-env.json"
    script = tmp_path / "bin" / "claude"
    script.parent.mkdir(parents=True)
    script.write_text(
        "#!/usr/bin/env python3\n"
        "import json, os, sys\n"
        "sys.stdin.readline()\n"
        "keys = ('CLAUDE_CODE_USE_VERTEX', 'ANTHROPIC_VERTEX_PROJECT_ID', 'CLOUD_ML_REGION',\n"
        "        'ANTHROPIC_API_KEY', 'ANTHROPIC_AUTH_TOKEN', 'ANTHROPIC_BASE_URL')\n"
        f"with open({str(dump)!r}, 'a') as f:\n"
        "    f.write(json.dumps({k: os.environ[k] for k in keys if k in os.environ}) + '\\n')\n"
        "print(json.dumps({'type': 'result', 'subtype': 'success', 'is_error': False, 'result': 'ok',\n"
        "                  'num_turns': 1, 'total_cost_usd': 0.0,\n"
        "                  'usage': {'input_tokens': 1, 'output_tokens': 1}}), flush=True)\n"
    )
    script.chmod(script.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return script, dump


async def test_the_worker_runs_claude_code_in_vertex_mode_without_a_key(
    start_worker: WorkerFactory, sqlite_url: str, tmp_path: Path
) -> None:
    claude, dump = _recording_claude(tmp_path)
    worker = start_worker(
        sqlite_url,
        env={
            "HARNESS_RUN_VERTEX_PROJECT": "my-project",
            "HARNESS_RUN_VERTEX_REGION": "us-east5",
            "HARNESS_RUN_CLAUDE_BIN": str(claude),
        },
    )
    sid = new_session(sqlite_url)
    async with WorkerClient(worker.url, TOKEN) as client:
        for secrets in ({}, {"ANTHROPIC_API_KEY": "sk-per-run-key-123"}):
            request = TurnRequest(turn_id=uuid.uuid4().hex, session_id=sid, prompt="hi", secrets=secrets)
            info = await client.start_turn(request)
            events = [e async for e in client.events(info.turn_id)]
            assert not events[-1]["result"]["is_error"], events[-1]["result"]
    keyless, keyed = [json.loads(line) for line in dump.read_text().splitlines()]
    assert keyless == {
        "CLAUDE_CODE_USE_VERTEX": "1",
        "ANTHROPIC_VERTEX_PROJECT_ID": "my-project",
        "CLOUD_ML_REGION": "us-east5",
    }
    # a key passed per run takes precedence (no Vertex mode); the CLI gets the model proxy's turn
    # token and address, never the key itself
    assert set(keyed) == {"ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL"}, keyed
    assert keyed["ANTHROPIC_API_KEY"].startswith("hrp-")
    assert keyed["ANTHROPIC_BASE_URL"].startswith("http://127.0.0.1:")
    assert "sk-per-run-key-123" not in dump.read_text()
