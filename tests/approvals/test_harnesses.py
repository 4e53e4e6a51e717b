"""Human-in-the-loop approvals on the real CLIs (local runtime) against the scripted model: a
matching tool call waits for a person; approve runs it, deny (with a reason the model reads) and a
timeout refuse it; a decision from another process reaches the waiting turn; a client killed while
its turn waits leaves the request denied ("the turn's process ended"), and the history says so."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
import time
from pathlib import Path

import pytest

from harness_run import AgentSpec, ApprovalPolicy, SecurityPolicy, local
from harness_run.events import ApprovalDecisionEvent, ApprovalRequestEvent
from harness_run.harness import GUARD_TOKEN_ENV
from harness_run.security import QUESTIONS_OFF, ApprovalSink, GuardBroker
from harness_run.testing import ScriptedModel, shell, text, tool_call

HARNESSES = ("claude-code", "codex", "opencode")
MODELS = {"claude-code": "claude-sonnet-4-6", "codex": "gpt-5.6-luna", "opencode": "openai/gpt-5.1"}
PROC = Path(__file__).with_name("approvals_proc.py")
ASK = {
    "questions": [
        {
            "question": "Which branch?",
            "header": "Branch",
            "options": [{"label": "main", "description": "m"}, {"label": "dev", "description": "d"}],
            "multiSelect": False,
        }
    ]
}


@pytest.fixture
def model() -> object:
    with ScriptedModel() as scripted:
        yield scripted


def _secrets(harness: str, model: ScriptedModel) -> dict[str, str]:
    if harness == "claude-code":
        return {"ANTHROPIC_BASE_URL": model.url, "ANTHROPIC_API_KEY": "scripted-dummy-key"}
    return {"OPENAI_BASE_URL": model.openai_url, "OPENAI_API_KEY": "scripted-dummy-key"}


def _engine(harness: str, workdir: Path, **policy: object) -> local.LocalEngine:
    approvals = ApprovalPolicy(**{"commands": ["touch *"], "timeout_s": 30, **policy})  # type: ignore[arg-type]
    spec = AgentSpec(name="careful", harness=harness, model=MODELS[harness], approvals=approvals)  # type: ignore[arg-type]
    return local.deploy(spec, workdir=workdir)


def _decisions(events: list[object]) -> list[tuple[str, str, str | None]]:
    return [(e.decision, e.by, e.reason) for e in events if isinstance(e, ApprovalDecisionEvent)]


@pytest.mark.harness
@pytest.mark.parametrize("harness", HARNESSES)
async def test_approve_runs_deny_reaches_the_model(
    harness: str, model: ScriptedModel, tmp_path: Path
) -> None:
    engine = _engine(harness, tmp_path / "w")
    session = engine.start_session()
    approved, denied = tmp_path / "approved.txt", tmp_path / "denied.txt"
    model.add(shell(f"touch {approved}"), shell(f"touch {denied}"), shell("echo free-to-run"), text("done"))
    run = session.run("make two files", secrets=_secrets(harness, model))
    requests: list[ApprovalRequestEvent] = []
    waited = 0.0
    async for event in run:
        if isinstance(event, ApprovalRequestEvent):
            requests.append(event)
            assert event.command is not None and "touch" in event.command
            assert event.expires_at > time.time() + 20
            start = time.monotonic()
            if len(requests) == 1:
                await run.approve(event.request_id)
            else:
                await run.deny(event.request_id, reason="not today, says Bob")
            waited += time.monotonic() - start
    result = await run
    assert not result.is_error, result.error
    assert approved.exists() and not denied.exists()
    outputs = model.requests[-1].tool_results
    assert "not today, says Bob" in outputs[1]  # the model reads the reason as the tool's error
    assert "free-to-run" in outputs[2]  # a command no pattern names runs without asking
    stored = session.events()
    assert [e.request_id for e in stored if isinstance(e, ApprovalRequestEvent)] == [
        r.request_id for r in requests
    ]
    assert _decisions(stored) == [("allow", "client", None), ("deny", "client", "not today, says Bob")]
    assert session.pending_approvals() == []
    engine.close()


@pytest.mark.harness
@pytest.mark.parametrize("harness", HARNESSES)
async def test_nobody_decides_the_call_is_denied(harness: str, model: ScriptedModel, tmp_path: Path) -> None:
    engine = _engine(harness, tmp_path / "w", timeout_s=1)
    session = engine.start_session()
    target = tmp_path / "late.txt"
    model.add(shell(f"touch {target}"), text("done"))
    start = time.monotonic()
    result = await session.run("make a file", secrets=_secrets(harness, model))
    assert not result.is_error, result.error
    assert not target.exists()
    assert "nobody decided within 1 s" in model.requests[-1].tool_results[-1]
    assert _decisions(session.events()) == [("deny", "timeout", "nobody decided within 1 s")]
    assert time.monotonic() - start < 30
    engine.close()


async def _proc(*args: str) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(
        sys.executable, str(PROC), *args, stdout=asyncio.subprocess.PIPE, cwd=Path(__file__).parent
    )


@pytest.mark.harness
@pytest.mark.parametrize("harness", HARNESSES)
async def test_a_decision_from_another_process(harness: str, model: ScriptedModel, tmp_path: Path) -> None:
    engine = _engine(harness, tmp_path / "w")
    session = engine.start_session()
    target = tmp_path / "remote.txt"
    model.add(shell(f"touch {target}"), text("done"))
    other = await _proc("decide", str(tmp_path / "w"), "careful", session.session_id, "allow")
    result = await session.run("make a file", secrets=_secrets(harness, model))
    out, _ = await other.communicate()
    assert not result.is_error, result.error
    assert other.returncode == 0 and target.exists()
    decided = [e for e in session.events() if isinstance(e, ApprovalDecisionEvent)]
    assert [(e.request_id, e.decision, e.key_id) for e in decided] == [
        (out.decode().strip(), "allow", "other-process")
    ]
    engine.close()


@pytest.mark.harness
@pytest.mark.parametrize("harness", HARNESSES)
async def test_a_killed_client_leaves_the_request_denied(
    harness: str, model: ScriptedModel, tmp_path: Path
) -> None:
    """The turn runs in the client's process (local runtime): killed while a call waits, the turn
    dies with it; re-attaching finishes the turn and settles the request as denied, in its history."""
    workdir = tmp_path / "w"
    target = tmp_path / "never.txt"
    model.add(shell(f"touch {target}"), text("done"))
    url = model.url if harness == "claude-code" else model.openai_url
    client = await _proc("turn", str(workdir), harness, MODELS[harness], url, f"touch {target}")
    assert client.stdout is not None
    session_id = (await asyncio.wait_for(client.stdout.readline(), 60)).decode().strip()
    request_id = (await asyncio.wait_for(client.stdout.readline(), 60)).decode().strip()
    assert request_id.startswith("apr-")
    client.send_signal(signal.SIGKILL)
    await client.wait()

    engine = local.get_engine("careful", workdir=workdir)
    os.environ.setdefault("HARNESS_RUN_TURN_LEASE", "15")
    session = engine.get_session(session_id)  # finishes the turn its dead process left
    assert session.pending_approvals() == []
    record = engine.store.get_approval(session_id, request_id)  # type: ignore[attr-defined]
    assert (record.decision, record.reason) == ("deny", "the turn's process ended")
    events = session.events()
    assert _decisions(events) == [("deny", "timeout", "the turn's process ended")]
    assert events[-1].type == "result" and not target.exists()
    engine.close()


@pytest.mark.harness
async def test_claude_code_question_tool_is_an_error_never_a_silent_denial(
    model: ScriptedModel, tmp_path: Path
) -> None:
    """The pinned Claude Code disables AskUserQuestion in headless (-p) sessions before any hook
    runs: the model gets the CLI's own error result, which says so — never a silent denial. (The
    guard's question path, for a CLI that lets the call reach its hook, is tested below.)"""
    engine = _engine("claude-code", tmp_path / "w")
    model.add(tool_call("AskUserQuestion", ASK), text("ok"))
    result = await engine.start_session().run("ask me", secrets=_secrets("claude-code", model))
    assert not result.is_error, result.error
    assert "AskUserQuestion is disabled" in model.requests[-1].tool_results[-1]
    engine.close()


async def test_the_guard_turns_a_question_into_a_question_event_and_the_answer(tmp_path: Path) -> None:
    """The served guard's question path: a ``question`` event, ``session.answer`` from the session,
    "The user answered: …" as the hook's reason; with no approvals policy, questions are off."""
    engine = _engine("claude-code", tmp_path / "w")
    session = engine.start_session()
    events: list[object] = []
    broker = GuardBroker()
    env = broker.substitute(SecurityPolicy(), {}, ApprovalPolicy(commands=["touch *"], timeout_s=30))
    store = engine.store

    asked = asyncio.Event()

    def emit(event: object) -> None:
        events.append(event)
        asked.set()

    broker.desk.attach(ApprovalSink(store, session.session_id, 1, emit))
    call = json.dumps({"tool_name": "AskUserQuestion", "tool_input": ASK}).encode()
    asking = asyncio.ensure_future(broker.http_verdict(env[GUARD_TOKEN_ENV], call))
    await asyncio.wait_for(asked.wait(), 5)
    question = session.pending_approvals()[0]
    assert (question.kind, question.question, question.options) == (
        "question",
        "Which branch?",
        ["main", "dev"],
    )
    start = time.monotonic()
    await session.answer(question.request_id, "dev, please")
    status, answer = await asyncio.wait_for(asking, 5)
    assert time.monotonic() - start < 0.1  # an in-process answer wakes the guard at once
    reason = answer["hookSpecificOutput"]["permissionDecisionReason"]
    assert status == 200 and reason == "The user answered: dev, please"
    assert [type(e).__name__ for e in events] == ["QuestionEvent", "QuestionAnswerEvent"]
    await broker.aclose()

    plain = GuardBroker()
    env = plain.substitute(SecurityPolicy(), {})
    status, answer = await plain.http_verdict(env[GUARD_TOKEN_ENV], call)
    assert answer["hookSpecificOutput"]["permissionDecisionReason"] == QUESTIONS_OFF
    await plain.aclose()
    engine.close()


@pytest.mark.harness
async def test_waiting_does_not_count_against_the_turns_timeout(model: ScriptedModel, tmp_path: Path) -> None:
    """A 3 s wait for a person in a turn with a 2.5 s timeout: the turn's clock stops meanwhile."""
    approvals = ApprovalPolicy(commands=["touch *"], timeout_s=30)
    spec = AgentSpec(name="careful", harness="codex", model=MODELS["codex"], approvals=approvals, timeout=2.5)
    engine = local.deploy(spec, workdir=tmp_path / "w")
    target = tmp_path / "slow.txt"
    model.add(shell(f"touch {target}"), text("done"))
    run = engine.start_session().run("make a file", secrets=_secrets("codex", model))
    async for event in run:
        if isinstance(event, ApprovalRequestEvent):
            await asyncio.sleep(3)
            await run.approve(event.request_id)
    result = await run
    assert result.stop_reason == "completed", result.error
    assert target.exists()
    engine.close()
