"""Approvals through the team server (issue 23): a real server, real Claude Code turns on the
scripted model, the client library (``harness_run.connect``) deciding over HTTP.

The owner's key allows one waiting call and denies the next with a reason the model reads; another
key holder is answered 404 for the same request (as for a session that does not exist); the
decision records the deciding key; the sessions list says the session waits; the OpenAPI document
names the routes and the events; a caller's overlay may add approvals but never drop them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import harness_run
from harness_run import AgentSpec, ApprovalPolicy
from harness_run.errors import PermissionDeniedError
from harness_run.events import ApprovalDecisionEvent, ApprovalRequestEvent, ToolResultEvent
from harness_run.server import ServerPolicy
from harness_run.testing import ScriptedModel, shell, text

from ._helpers import MODEL, ServerThread, call

pytestmark = pytest.mark.harness

_KEY = {"ANTHROPIC_API_KEY": "sk-test"}


def _spec(model: ScriptedModel) -> AgentSpec:
    return AgentSpec(
        name="careful",
        harness="claude-code",
        model=MODEL,
        model_base_url=model.url,
        approvals=ApprovalPolicy(commands=["echo push*"], timeout_s=120),
    )


async def test_the_owner_decides_through_the_server_and_another_key_gets_404(
    tmp_path: Path, scripted_model: ScriptedModel
) -> None:
    scripted_model.add(shell("echo push-allowed"), text("pushed"))
    scripted_model.add(shell("echo push-refused"), text("could not push"))
    with ServerThread(tmp_path, [_spec(scripted_model)], scopes=("turn",)) as server:
        base = server.url
        other = server.new_key("someone else", "turn")
        engine = harness_run.connect(server.url, api_key=server.key)
        _, me = call(f"{base}/v1/keys/me", key=server.key)
        session = engine.start_session()
        sid = session.session_id

        run = session.run("push it", secrets=_KEY)
        async for event in run:
            if isinstance(event, ApprovalRequestEvent):
                assert event.command == "echo push-allowed" and event.tool == "Bash"
                rid = event.request_id
                path = f"{base}/v1/sessions/{sid}/approvals/{rid}"
                # the list says the session waits; the pending request is listed for its owner only
                _, listed = call(f"{base}/v1/sessions", key=server.key)
                assert listed["approvals"] == {sid: 1}
                status, pending = call(f"{base}/v1/sessions/{sid}/approvals?pending=1", key=server.key)
                assert status == 200 and [a["request_id"] for a in pending["approvals"]] == [rid]
                assert [p.request_id for p in session.pending_approvals()] == [rid]
                for method, body in (("GET", None), ("POST", {"decision": "allow"})):
                    status, refused = call(path, method, body, key=other)
                    assert status == 404 and "no session" in refused["message"], refused
                assert call(f"{base}/v1/sessions/{sid}/approvals", key=other)[0] == 404
                status, bad = call(path, "POST", {"decision": "allow", "answer": "x"}, key=server.key)
                assert status == 422, bad
                await run.approve(rid)
                status, again = call(path, "POST", {"decision": "deny"}, key=server.key)
                assert status == 409 and "already decided" in again["message"]  # the first decision won
        result = await run
        assert not result.is_error, result.error
        decided = [e for e in run.events if isinstance(e, ApprovalDecisionEvent)]
        assert [(d.decision, d.by, d.key_id) for d in decided] == [("allow", "client", me["key_id"])]
        outputs = [e.content for e in run.events if isinstance(e, ToolResultEvent)]
        assert any("push-allowed" in o for o in outputs), outputs

        run = session.run("push again", secrets=_KEY)
        async for event in run:
            if isinstance(event, ApprovalRequestEvent):
                await session.deny(event.request_id, "not on a Friday")
        result = await run
        assert not result.is_error, result.error
        assert any("not on a Friday" in r for r in scripted_model.requests[-1].tool_results)
        assert not any("push-refused" in e.content for e in run.events if isinstance(e, ToolResultEvent))

        status, turn2 = call(f"{base}/v1/sessions/{sid}/approvals", key=server.key)  # the last turn's
        assert status == 200 and [(a["turn"], a["decision"], a["reason"]) for a in turn2["approvals"]] == [
            (2, "deny", "not on a Friday")
        ]
        status, every = call(f"{base}/v1/sessions/{sid}/approvals?turn=all", key=server.key)
        assert [a["key_id"] for a in every["approvals"]] == [me["key_id"], me["key_id"]]
        assert session.pending_approvals() == []
        await engine.aclose()


def test_the_document_names_the_routes_and_the_events(tmp_path: Path, scripted_model: ScriptedModel) -> None:
    with ServerThread(tmp_path, [_spec(scripted_model)]) as server:
        status, doc = call(f"{server.url}/openapi.json")
    assert status == 200
    decide = doc["paths"]["/v1/sessions/{session_id}/approvals/{request_id}"]["post"]
    assert decide["requestBody"]["content"]["application/json"]["schema"]["$ref"].endswith("/Decision")
    assert "get" in doc["paths"]["/v1/sessions/{session_id}/approvals"]
    schemas = doc["components"]["schemas"]
    for name in ("ApprovalRecord", "ApprovalRequestEvent", "ApprovalDecisionEvent", "QuestionEvent"):
        assert name in schemas, name
    stream = doc["paths"]["/v1/sessions/{session_id}/events"]["get"]["responses"]["200"]["content"]
    assert set(stream["text/event-stream"]["x-event-types"]) >= {"approval_request", "approval_decision"}


@pytest.mark.parametrize(
    ("overlay", "field"),
    [
        ({"approvals": None}, "config.approvals"),
        ({"approvals": {"commands": ["rm *"]}}, "config.approvals.commands"),
        ({"approvals": {"commands": ["echo push*"], "timeout_s": 900}}, "config.approvals.timeout_s"),
    ],
)
def test_an_overlay_may_add_approvals_but_never_drop_them(
    overlay: dict[str, Any], field: str, scripted_model: ScriptedModel
) -> None:
    policy, spec = ServerPolicy(), _spec(scripted_model)
    with pytest.raises(PermissionDeniedError) as refused:
        policy.check_session(spec, overlay)
    assert refused.value.field == field
    with pytest.raises(PermissionDeniedError):
        policy.check_turn(spec, None, overlay, _KEY)
    added = {"approvals": {"commands": ["echo push*", "rm *"], "tools": ["WebFetch"], "timeout_s": 30}}
    policy.check_session(spec, added)
    policy.check_turn(spec, added, added, _KEY)
    ServerPolicy(allow_looser_security=True, allow_higher_limits=True).check_session(spec, overlay)
