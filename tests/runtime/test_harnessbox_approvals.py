"""The HarnessBox facade passes approvals through (issue 23): an ``approval_request`` arrives in the
``send_message`` stream like any event, and ``session.approve``/``deny`` on the HarnessBox session
decide it. Real ``claude`` CLI, scripted model, local provider."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness_run import ApprovalPolicy
from harness_run.harnessbox import HarnessBox, LocalProvider
from harness_run.testing import ScriptedModel, shell, text

from ._helpers import model_secrets

pytestmark = pytest.mark.harness


async def test_approval_events_stream_through_send_message_and_the_session_decides(
    scripted_model: ScriptedModel, tmp_path: Path
) -> None:
    scripted_model.add(shell("echo from-the-box"), text("it ran"))
    scripted_model.add(shell("echo not-from-the-box"), text("left it"))
    hb = HarnessBox(
        provider=LocalProvider(workdir=tmp_path / "wd"),
        harness="claude-code",
        secrets={"harness_secrets": model_secrets(scripted_model)},
        approvals=ApprovalPolicy(commands=["echo *"]),
    )
    session = await hb.create_session()
    seen: list[str] = []
    async for event in session.send_message("run it"):
        seen.append(event.type)
        if event.type == "approval_request":
            [pending] = session.pending_approvals()
            await session.approve(pending.request_id)
    assert seen.index("approval_request") < seen.index("approval_decision") < seen.index("result")
    async for event in session.send_message("run the other"):
        if event.type == "approval_request":
            await session.deny(session.pending_approvals()[0].request_id, "not from the box")
    assert any("not from the box" in r for r in scripted_model.requests[-1].tool_results)
    assert any("from-the-box" in r for r in scripted_model.requests[1].tool_results)
    await hb.kill()
