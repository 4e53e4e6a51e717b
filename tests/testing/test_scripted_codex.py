"""The scripted model's Responses API against the REAL Codex CLI (when one is installed).

The binary is found exactly as the Codex driver finds it: ``HARNESS_RUN_CODEX_BIN``, else the
pinned ``openai-codex-cli-bin`` wheel in the project's venv (the ``local`` extra), else PATH — never a
developer machine's leftovers.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from harness_run.errors import HarnessNotFoundError
from harness_run.harness import get_driver
from harness_run.testing import ScriptedModel, error, shell, text, write_file

pytestmark = pytest.mark.harness


@pytest.fixture(scope="module")
def codex_binary() -> str:
    try:
        return get_driver("codex").locate()
    except HarnessNotFoundError as exc:
        pytest.skip(f"no codex binary: {exc}")


@pytest.fixture
def codex_home() -> Iterator[Path]:
    # Outside TMPDIR: a CODEX_HOME under /tmp breaks Codex's workspace-write sandbox helpers.
    home = Path.home() / ".cache" / "hr-codex-home-test" / uuid.uuid4().hex[:8]
    home.mkdir(parents=True)
    try:
        yield home
    finally:
        shutil.rmtree(home, ignore_errors=True)


def run_codex(
    binary: str, model: ScriptedModel, home: Path, workspace: Path, prompt: str
) -> list[dict[str, Any]]:
    cmd = [binary, "exec", "--json", "--skip-git-repo-check"]
    for override in [
        *model.codex_config_overrides(),
        'approval_policy="never"',
        'sandbox_mode="workspace-write"',
    ]:
        cmd += ["-c", override]
    cmd += ["-m", "gpt-5.1-codex", prompt]
    env = {**os.environ, **model.env_for("codex"), "CODEX_HOME": str(home)}
    proc = subprocess.run(
        cmd,
        cwd=workspace,
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    return [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]


def test_codex_shell_intent_and_write_file(codex_binary: str, codex_home: Path, tmp_path: Path) -> None:
    script = [shell("echo hi > out.txt"), write_file("sub/w.txt", "it's ok\n"), text("done")]
    with ScriptedModel(script) as model:
        events = run_codex(codex_binary, model, codex_home, tmp_path, "make files")
    assert (tmp_path / "out.txt").read_text() == "hi\n"
    assert (tmp_path / "sub" / "w.txt").read_text() == "it's ok\n"
    messages = [e["item"]["text"] for e in events if e.get("item", {}).get("type") == "agent_message"]
    assert messages == ["done"]
    completed = [e for e in events if e["type"] == "turn.completed"]
    assert completed[0]["usage"]["input_tokens"] > 0
    assert [r.api for r in model.requests] == ["responses"] * 3
    assert "exec_command" in model.requests[0].tool_names
    assert model.requests[0].last_user_text == "make files"
    assert len(model.requests[-1].tool_results) == 2


def test_codex_error_fails_the_turn(codex_binary: str, codex_home: Path, tmp_path: Path) -> None:
    with ScriptedModel([error(500, "codex boom")]) as model:
        events = run_codex(codex_binary, model, codex_home, tmp_path, "hi")
    assert any(e["type"] == "turn.failed" for e in events)
    assert not model.exhausted
