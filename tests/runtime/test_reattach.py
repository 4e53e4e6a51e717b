"""Re-attach to a session from other Python processes after the first one exited, and continue it
natively — also after its workspace and Claude Code's own session files were deleted (restored from
the checkpoint in the store)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from harness_run.testing import ScriptedModel, shell, text

pytestmark = pytest.mark.harness

HELPER = Path(__file__).with_name("reattach_proc.py")


def step(*args: str) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, str(HELPER), *args], capture_output=True, text=True, timeout=90, check=False
    )
    assert done.returncode == 0, f"helper process failed ({done.returncode}):\n{done.stderr[-3000:]}"
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_reattach_and_continue_from_other_processes(model: ScriptedModel, workdir: Path) -> None:
    model.add(
        shell("printf 'from turn one' > made.txt"),
        text("turn one answer"),
        text("turn two answer"),
        text("turn three answer"),
    )

    # process 1: deploy, run a turn, exit
    first = step("start", str(workdir), model.url, "first prompt alpha")
    sid = first["session_id"]
    assert first["result"]["text"] == "turn one answer"
    assert not first["result"]["is_error"]

    # process 2: find the engine by name, re-attach, read the history, continue natively
    second = step("get_engine", str(workdir), model.url, sid, "second prompt bravo")
    assert second["status"] == "idle"
    [turn1] = second["history"]
    assert turn1["turn"] == 1
    assert turn1["prompt"] == "first prompt alpha"
    assert turn1["settings"]["model"] == "claude-sonnet-4-6"
    assert turn1["result"]["text"] == "turn one answer"
    assert second["last_result"] == first["result"]
    assert second["event_types"][0] == "user"
    assert second["event_types"][-1] == "result"
    assert "tool_use" in second["event_types"]
    assert second["result"]["text"] == "turn two answer"
    assert second["result"]["session_id"] == sid
    assert second["result"]["turn"] == 2
    assert second["turns_after"] == [1, 2]
    request = model.main_requests[2]
    assert request.last_user_text == "second prompt bravo"
    assert "first prompt alpha" in request.user_texts
    assert "turn one answer" in request.text  # resumed natively: turn 1 travels with turn 2
    assert any(name == "Bash" and "made.txt" in args for name, args in request.tool_calls)

    # the machine lost the session's files: the workspace and Claude Code's config dir (its transcript)
    session_dir = workdir / "sessions" / sid
    shutil.rmtree(session_dir / "workspace")
    shutil.rmtree(session_dir / "home")

    # process 3: deploy the same spec again, re-attach, continue: restored from the checkpoint
    third = step("deploy", str(workdir), model.url, sid, "third prompt charlie")
    assert third["engine_version"] == second["engine_version"]
    assert [t["turn"] for t in third["history"]] == [1, 2]
    assert third["result"]["text"] == "turn three answer"
    assert not third["result"]["is_error"]
    assert third["made"] == "from turn one"  # the workspace came back
    request = model.main_requests[3]
    assert request.last_user_text == "third prompt charlie"
    assert request.user_texts[:2] == ["first prompt alpha", "second prompt bravo"]
    assert "turn one answer" in request.text
    assert "turn two answer" in request.text
    assert len(model.main_requests) == 4
