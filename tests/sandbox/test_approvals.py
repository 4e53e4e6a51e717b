"""Approvals on the sandbox runtime (issue 23): the turn runs in a Sandbox's worker on the test
cluster, the history store is GCS (fake-gcs-server); the worker's guard stores the pending request
there and waits, this process decides it through the same store (the first decision wins, a
generation-conditional write), and the guard reads the decision back. Real ``claude`` in the
container, scripted model on 127.0.0.1."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest

from harness_run import AgentSpec, ApprovalPolicy
from harness_run.events import ApprovalDecisionEvent, ApprovalRequestEvent, ToolResultEvent
from harness_run.testing import Reply, Rule, ScriptedModel

from .conftest import Deployed, spec

pytestmark = [pytest.mark.docker, pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(900)]

RULES = [
    Rule(match="approve me", reply=Reply.shell("echo approved-in-a-sandbox")),
    Rule(match="deny me", reply=Reply.shell("echo never-in-a-sandbox")),
    Rule(reply=Reply.text("done"), tool_result=True),
]


@pytest.fixture(scope="module")
def model() -> Iterator[ScriptedModel]:
    with ScriptedModel(RULES) as scripted:
        yield scripted


@pytest.fixture(scope="module")
def sandbox_spec() -> AgentSpec:
    return spec().model_copy(update={"approvals": ApprovalPolicy(commands=["echo *"], timeout_s=120)})


@pytest.fixture
async def engine(deployed: Deployed) -> AsyncIterator[Any]:
    eng = deployed.get_engine(idle_ttl=60.0, claim_timeout=60.0)
    yield eng
    await eng.aclose()


async def test_approve_then_deny_in_a_sandbox(deployed: Deployed, engine: Any) -> None:
    session = engine.start_session()
    run = session.run("approve me", secrets=deployed.secrets())
    async for event in run:
        if isinstance(event, ApprovalRequestEvent):
            assert [p.request_id for p in session.pending_approvals()] == [event.request_id]
            await run.approve(event.request_id)
    result = await run
    assert not result.is_error, result.error
    assert any("approved-in-a-sandbox" in e.content for e in run.events if isinstance(e, ToolResultEvent))

    run = session.run("deny me", secrets=deployed.secrets())
    async for event in run:
        if isinstance(event, ApprovalRequestEvent):
            await session.deny(event.request_id, "not in the cluster")
    result = await run
    assert not result.is_error, result.error
    assert any("not in the cluster" in r for r in deployed.model.requests[-1].tool_results)
    stored = [e for e in session.events() if isinstance(e, ApprovalDecisionEvent)]
    assert [(e.turn, e.decision, e.by) for e in stored] == [(1, "allow", "client"), (2, "deny", "client")]
