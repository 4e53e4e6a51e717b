"""The harnesses' own files in a live session home (Claude Code's projects/*.jsonl, Codex's rollouts
and thread databases, OpenCode's SQLite store) hold no per-run secret once a turn has ended, are the
owner's only, and still resume the conversation natively — on each real CLI against the scripted
model."""

from __future__ import annotations

import stat
import uuid
from pathlib import Path

import pytest

from harness_run.testing import ScriptedModel, shell, text

from .conftest import Agent, Harness

pytestmark = pytest.mark.harness


def files_holding(root: Path, value: str) -> list[str]:
    needle = value.encode()
    return [
        str(p) for p in root.rglob("*") if p.is_file() and not p.is_symlink() and needle in p.read_bytes()
    ]


async def test_a_secret_the_agent_printed_is_in_no_file_after_the_turn_and_the_session_resumes(
    harness: Harness, agent: Agent, model: ScriptedModel
) -> None:
    canary = f"canary-{uuid.uuid4().hex}"
    model.add(
        shell('echo "the key is $CANARY_SECRET"'),
        text(f"the secret was {canary}"),  # the model repeats it: in the transcript twice over
        text("second answer kilo"),
    )
    engine = agent(secrets=["CANARY_SECRET"])
    session = engine.start_session()
    secrets = {**harness.secrets(model), "CANARY_SECRET": canary}
    first = await session.run("print the secret juliet", secrets=secrets)
    assert not first.is_error, first.error
    assert any(canary in r for r in model.main_requests[1].tool_results)  # the agent really had it

    home = engine.workdir / "sessions" / session.session_id / "home"
    driver_files = [p for p in home.rglob("*") if p.is_file() and p.stat().st_size]
    assert driver_files, "the harness wrote nothing into its home"
    assert files_holding(engine.workdir, canary) == []  # home, workspace, store: nowhere
    modes = {p: stat.S_IMODE(p.lstat().st_mode) for p in [home, *home.rglob("*")] if not p.is_symlink()}
    loose = {str(p): oct(m) for p, m in modes.items() if m & 0o077}
    assert loose == {}, "group/other access in the session home"

    second = await session.send("and now the second prompt", secrets=secrets)
    assert not second.is_error, second.error
    assert second.text == "second answer kilo"
    assert second.native_session_id == first.native_session_id
    resumed = model.main_requests[-1]
    assert "print the secret juliet" in resumed.user_texts  # the native transcript was read back
    assert "and now the second prompt" in resumed.user_texts
    assert files_holding(engine.workdir, canary) == []
