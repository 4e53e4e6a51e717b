"""``harness-run run`` as a user runs it: the console script in a fresh process, real ``claude``
against the scripted model. The command ends its process without the interpreter's teardown
(``fast_exit``): every event must still reach stdout, the exit code must be the turn's, and a
second ``run --session`` must find the history the first one stored."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from harness_run.testing import ScriptedModel, error, text, write_file

from ._helpers import API_KEY, run_console


def _run(
    model: ScriptedModel, tmp_path: Path, *args: str, cwd: Path | None = None
) -> tuple[int, list[dict[str, Any]], str]:
    spec = tmp_path / "spec.yaml"
    spec.write_text(
        "name: cli\nharness: claude-code\nmodel: claude-sonnet-4-6\nenv:\n  CLAUDE_CODE_MAX_RETRIES: '0'\n"
    )
    env = {
        **os.environ,
        "ANTHROPIC_BASE_URL": model.url,
        "ANTHROPIC_API_KEY": API_KEY,
        "HARNESS_RUN_HOME": str(tmp_path / "home"),
    }
    return run_console(["run", str(spec), *args, "--json"], env, cwd)


@pytest.mark.harness
def test_run_prints_every_event_and_exits_with_the_turns_outcome(
    model: ScriptedModel, tmp_path: Path
) -> None:
    model.add(write_file("made.txt", "hello\n"), text("wrote it"), error(400, "scripted refusal qx31"))

    code, events, stderr = _run(model, tmp_path, "make a file")
    assert code == 0, stderr
    assert (events[0]["type"], events[-1]["type"]) == ("user", "result")
    assert any(e["type"] == "tool_use" for e in events)
    assert events[-1]["result"]["text"] == "wrote it"
    sessions = list((tmp_path / "home" / "sessions").iterdir())
    assert len(sessions) == 1
    assert (sessions[0] / "workspace" / "made.txt").read_text() == "hello\n"

    # the second turn continues the stored session; the model's error is exit code 1, fully printed
    code, events, stderr = _run(model, tmp_path, "again", "--session", sessions[0].name)
    assert code == 1, stderr
    assert events[-1]["type"] == "result"
    assert events[-1]["result"]["is_error"] is True
    assert "scripted refusal qx31" in events[-1]["result"]["error"]
    assert "Traceback" not in stderr


@pytest.mark.harness
def test_run_with_a_relative_workdir_resolves_it_against_the_current_directory(
    model: ScriptedModel, tmp_path: Path
) -> None:
    """``--workdir wd`` is the directory ``wd`` under the shell's current directory, for both turns;
    nothing is written under HARNESS_RUN_HOME."""
    model.add(write_file("rel.txt", "in wd\n"), text("made it"), text("second"))

    code, events, stderr = _run(model, tmp_path, "make a file", "--workdir", "wd", cwd=tmp_path)
    assert code == 0, stderr
    assert events[-1]["result"]["is_error"] is False
    (session_dir,) = (tmp_path / "wd" / "sessions").iterdir()
    assert (session_dir / "workspace" / "rel.txt").read_text() == "in wd\n"
    assert not (tmp_path / "home" / "sessions").exists()

    code, events, stderr = _run(
        model, tmp_path, "again", "--workdir", "wd", "--session", session_dir.name, cwd=tmp_path
    )
    assert code == 0, stderr
    assert events[-1]["result"]["text"] == "second"
