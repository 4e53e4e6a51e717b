"""``harness-run top`` counts the tool calls waiting for a person (issue 23): a real ``claude`` turn
whose shell call waits is shown with "1 pending", from the local store and from a server."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from server._helpers import MODEL, ServerThread, cli

import harness_run
from harness_run import AgentSpec, ApprovalPolicy, Engine, local
from harness_run.events import ApprovalRequestEvent
from harness_run.testing import ScriptedModel, shell, text

pytestmark = pytest.mark.harness

WIDE = {"COLUMNS": "220"}


def _spec(model: ScriptedModel) -> AgentSpec:
    return AgentSpec(
        name="waiting",
        harness="claude-code",
        model=MODEL,
        model_base_url=model.url,
        approvals=ApprovalPolicy(commands=["echo *"]),
    )


async def _top_while_waiting(engine: Engine, *where: str, env: dict[str, str] | None = None) -> str:
    """The ``top --once`` table while the session's shell call waits (then it is approved)."""
    session = engine.start_session()
    run = session.run("run it", secrets={"ANTHROPIC_API_KEY": "sk-test"})
    shown = ""
    async for event in run:
        if isinstance(event, ApprovalRequestEvent):
            done = await asyncio.to_thread(cli, "top", "--once", *where, env={**WIDE, **(env or {})})
            assert done.returncode == 0, done.stderr
            [shown] = [row for row in done.stdout.splitlines() if session.session_id in row]
            assert "1 approvals pending" in done.stdout
            await run.approve(event.request_id)
    assert not (await run).is_error
    return shown


async def test_top_counts_pending_approvals(tmp_path: Path, scripted_model: ScriptedModel) -> None:
    scripted_model.add(shell("echo one"), text("done"), shell("echo two"), text("done"))
    engine = local.deploy(_spec(scripted_model), workdir=tmp_path / "local")
    row = await _top_while_waiting(engine, "--workdir", str(tmp_path / "local"))
    await engine.aclose()
    assert row.rstrip(" │").endswith("1 pending")
    with ServerThread(tmp_path / "served", [_spec(scripted_model)], scopes=("turn",)) as server:
        remote = harness_run.connect(server.url, api_key=server.key)
        row = await _top_while_waiting(
            remote, "--server", server.url, env={"HARNESS_RUN_API_KEY": server.key}
        )
        await remote.aclose()
    assert "running" in row and row.rstrip(" │").endswith("1 pending")
