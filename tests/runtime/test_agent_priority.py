"""``serve``'s local engines run their agents below the server's CPU priority (issue 22: a burst of
CLI start-ups must not starve the event loop); the library's default leaves it unchanged."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness_run import AgentSpec
from harness_run.runtime.local import LocalEngine
from harness_run.server import AGENT_NICE
from harness_run.testing import ScriptedModel, shell, text

from ._helpers import MODEL, model_secrets

pytestmark = pytest.mark.harness


@pytest.mark.parametrize("nice", [0, AGENT_NICE])
async def test_the_agent_runs_at_the_engine_s_priority(
    model: ScriptedModel, workdir: Path, nice: int
) -> None:
    model.add(shell("nice"), text("done"))
    spec = AgentSpec(name="prio", harness="claude-code", model=MODEL)
    async with LocalEngine(spec, workdir=workdir, agent_nice=nice) as engine:
        session = engine.start_session()
        await session.run("how nice?", secrets=model_secrets(model))
        [result] = [e for e in session.events(1) if e.type == "tool_result"]
        assert result.content.strip() == str(nice)  # type: ignore[union-attr]
