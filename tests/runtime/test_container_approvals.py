"""Approvals on the container runtime (issue 23): the turn runs in the in-image worker (the Agent
Sandbox code path), whose guard stores the pending request in the shared history store and waits;
this process decides it (``run.approve`` / ``session.deny``) by writing the same store, and the
worker's guard reads the decision back. One image with all three harnesses; each one's shell call
is approved (it runs) and then denied with a reason (it does not run; the model reads the reason).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from harness_run import AgentSpec, ApprovalPolicy, local
from harness_run.events import ApprovalDecisionEvent, ApprovalRequestEvent, ToolResultEvent
from harness_run.testing import Reply, Rule, ScriptedModel

from ._harnesses import HARNESS

pytestmark = [pytest.mark.docker, pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(900)]

RULES = [
    Rule(match="approve me", reply=Reply.shell("echo approved-by-a-person")),
    Rule(match="deny me", reply=Reply.shell("echo should-never-run")),
    Rule(reply=Reply.text("done"), tool_result=True),
]


def _spec() -> AgentSpec:
    return AgentSpec(
        name="ctr-approvals",
        harness="claude-code",
        model=HARNESS["claude-code"].model,
        extra_harnesses=("codex", "opencode"),
        approvals=ApprovalPolicy(commands=["echo *"], timeout_s=120),
    )


@pytest.fixture(scope="module")
def deployed(
    container_opts: Any, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[ScriptedModel, Path]]:
    with ScriptedModel(RULES) as model:
        workdir = tmp_path_factory.mktemp("ctr-approvals") / "workdir"
        started = time.perf_counter()
        engine = local.deploy(_spec(), workdir=workdir, isolation="container", container=container_opts)
        print(f"\ncontainer deploy (build or find {engine.image}): {time.perf_counter() - started:.1f} s")
        engine.close()
        yield model, workdir


@pytest.mark.parametrize("harness", ["claude-code", "codex", "opencode"])
async def test_approve_then_deny_in_a_container(
    harness: str, deployed: tuple[ScriptedModel, Path], container_opts: Any
) -> None:
    model, workdir = deployed
    engine = local.deploy(_spec(), workdir=workdir, isolation="container", container=container_opts)
    h = HARNESS[harness]
    try:
        session = engine.start_session({"harness": harness, "model": h.model})
        run = session.run("approve me", secrets=h.secrets(model))
        async for event in run:
            if isinstance(event, ApprovalRequestEvent):
                assert event.command is not None and "echo approved-by-a-person" in event.command
                assert [p.request_id for p in session.pending_approvals()] == [event.request_id]
                await run.approve(event.request_id)
        result = await run
        assert not result.is_error, result.error
        outputs = "\n".join(e.content for e in run.events if isinstance(e, ToolResultEvent))
        assert "approved-by-a-person" in outputs
        [decided] = [e for e in run.events if isinstance(e, ApprovalDecisionEvent)]
        assert (decided.decision, decided.by) == ("allow", "client")

        run = session.run("deny me", secrets=h.secrets(model))
        async for event in run:
            if isinstance(event, ApprovalRequestEvent):
                await session.deny(event.request_id, reason="not in this container")
        result = await run
        assert not result.is_error, result.error
        assert any("not in this container" in r for r in model.requests[-1].tool_results)
        outputs = "\n".join(e.content for e in run.events if isinstance(e, ToolResultEvent))
        assert "should-never-run" not in outputs.replace("echo should-never-run", "")
        stored = [e for e in session.events(2) if isinstance(e, ApprovalDecisionEvent)]
        assert [(e.decision, e.reason) for e in stored] == [("deny", "not in this container")]
    finally:
        await engine.aclose()
