"""The approvals interface without a harness: the policy, what waits, the events, the session's
decisions written to the store (as another process would) and orphans settled fail-closed."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from harness_run import AgentSpec, ApprovalPolicy, SpecError, TurnConfig, local
from harness_run.errors import ApprovalNotFoundError, UsageError
from harness_run.events import (
    ApprovalDecisionEvent,
    ApprovalRequestEvent,
    QuestionEvent,
    RunResult,
    parse_event,
)
from harness_run.harness import approval_match, approval_rules, guard_decide
from harness_run.spec import effective_spec
from harness_run.store import ApprovalRecord, TurnRecord

SPEC = AgentSpec(name="careful", harness="codex", model="gpt-5.6-luna")


def test_policy_fields_overlays_and_digest() -> None:
    policy = ApprovalPolicy(commands=["git push*", "git push*"], tools=["WebFetch"], timeout_s=5)
    assert policy.commands == ("git push*",) and policy.timeout_s == 5.0
    with pytest.raises(SpecError, match="timeout_s"):
        ApprovalPolicy(timeout_s=0)
    with pytest.raises(SpecError, match="commands"):
        ApprovalPolicy(commands=[""])
    spec = SPEC.model_copy(update={"approvals": policy})
    assert AgentSpec.from_dict(spec.to_dict()) == spec
    assert "approvals" not in SPEC.to_dict()  # specs without approvals keep their digest
    assert effective_spec(SPEC, TurnConfig(approvals={"file_writes": True})).approvals == ApprovalPolicy(
        file_writes=True
    )
    assert effective_spec(spec, TurnConfig(approvals=None)).approvals is None
    assert policy.merged(ApprovalPolicy(file_writes=True, timeout_s=60)) == ApprovalPolicy(
        commands=["git push*"], tools=["WebFetch"], file_writes=True, timeout_s=5
    )


def test_what_waits() -> None:
    asks = approval_rules(ApprovalPolicy(commands=["git push*"], tools=["WebFetch"], file_writes=True))
    assert asks is not None
    assert approval_match(asks, "Bash", {"command": "cd app && git push origin main"})
    assert approval_match(asks, "exec_command", {"cmd": ["bash", "-lc", "git push"]})
    assert approval_match(asks, "Bash", {"command": "git status"}) is None
    assert approval_match(asks, "webfetch", {"url": "https://x"})
    assert approval_match(asks, "Write", {"file_path": "a.txt", "content": "x"})
    assert approval_match(asks, "Read", {"file_path": "a.txt"}) is None
    every = approval_rules(ApprovalPolicy(commands=["*"]))
    assert every is not None and approval_match(every, "Bash", {"command": "ls"})
    assert approval_rules(ApprovalPolicy()) is None  # names nothing: nothing waits
    # the self-contained hook (no engine to ask) denies what would wait: fail closed
    rules = {"denied_tools": [], "approvals": asks}
    assert "approval" in (
        guard_decide(rules, '{"tool_name":"Bash","tool_input":{"command":"git push"}}') or ""
    )
    assert guard_decide(rules, '{"tool_name":"Bash","tool_input":{"command":"ls"}}') is None


def test_events_round_trip() -> None:
    for event in (
        ApprovalRequestEvent(
            request_id="r", tool="Bash", command="ls", input={"command": "ls"}, expires_at=1.0
        ),
        ApprovalDecisionEvent(request_id="r", decision="deny", by="timeout", reason="late"),
        QuestionEvent(request_id="q", question="Which?", options=["a", "b"], expires_at=2.0),
    ):
        assert parse_event(event.model_dump(mode="json")) == event


async def test_session_decisions_from_a_reattached_client(tmp_path: Path) -> None:
    """A request stored by a turn's guard is decided through another client of the session; the
    first decision wins; an orphaned request (its turn ended) is settled as denied."""
    engine = local.deploy(SPEC, workdir=tmp_path / "w")
    session = engine.start_session()
    store = engine.store
    now = time.time()

    def put(rid: str, turn: int = 1, kind: str = "approval") -> None:
        store.put_approval(  # type: ignore[attr-defined]
            ApprovalRecord.model_validate(
                {
                    "session_id": session.session_id,
                    "turn": turn,
                    "request_id": rid,
                    "kind": kind,
                    "tool": "Bash",
                    "command": "git push",
                    "created_at": now,
                    "expires_at": now + 30,
                }
            )
        )

    put("a"), put("b"), put("q", kind="question")
    other = local.get_engine("careful", workdir=tmp_path / "w").get_session(session.session_id)
    assert [r.request_id for r in other.pending_approvals()] == ["a", "b", "q"]
    assert (await other.approve("a", key_id="k")).decision == "allow"
    denied = await other.deny("b", reason="not today")
    assert (denied.decision, denied.reason) == ("deny", "not today")
    assert (await session.answer("q", "main")).answer == "main"
    with pytest.raises(UsageError, match="already decided"):
        await session.deny("a")
    with pytest.raises(ApprovalNotFoundError):
        await session.approve("missing")
    assert session.pending_approvals() == []

    put("orphan", turn=1)  # turn 1 ended (stored) while it waited: the process died
    store.put_turn(
        TurnRecord(
            session_id=session.session_id,
            turn=1,
            prompt="p",
            started_at=now,
            result=RunResult(stop_reason="interrupted"),
        )
    )
    assert session.pending_approvals() == []
    settled = store.get_approval(session.session_id, "orphan")  # type: ignore[attr-defined]
    assert (settled.decision, settled.by, settled.reason) == ("deny", "timeout", "the turn's process ended")
    engine.close()


def test_opencode_and_codex_refuse_what_their_hooks_cannot_pause() -> None:
    """Only shell commands pass through OpenCode's guard, and Codex's patch tool passes no hook:
    such approvals would never ask anyone, so they are refused naming the field (never ignored)."""
    from harness_run.errors import UsageError
    from harness_run.harness import get_driver

    for policy, field in (
        (ApprovalPolicy(tools=["webfetch"]), "approvals.tools"),
        (ApprovalPolicy(file_writes=True), "approvals.file_writes"),
    ):
        spec = AgentSpec(name="oc", harness="opencode", model="openai/gpt-5.1", approvals=policy)
        with pytest.raises(UsageError, match=field):
            get_driver("opencode").check(spec)
    ok = AgentSpec(
        name="oc",
        harness="opencode",
        model="openai/gpt-5.1",
        approvals=ApprovalPolicy(commands=["git push*"]),
    )
    get_driver("opencode").check(ok)
