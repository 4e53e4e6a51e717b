"""One behaviour, three harnesses: the same spec and the same calls give the same user-visible
results on Claude Code, Codex and OpenCode — the real CLIs against the scripted model on 127.0.0.1.

Every test runs once per harness (the ``harness`` fixture). Where a harness cannot do something, the
test asserts the refusal (a clear error naming the field and the harness, before anything starts).
"""

from __future__ import annotations

import time
import uuid

import pytest
from pydantic import BaseModel
from runtime._helpers import processes_with, wait_until, workspace_of

from harness_run.errors import UsageError
from harness_run.events import (
    CostUnknownEvent,
    DeltaEvent,
    MessageEvent,
    ResultEvent,
    SetupEvent,
    StartedEvent,
    StatusEvent,
    UserEvent,
)
from harness_run.harness import get_driver
from harness_run.spec import TurnConfig
from harness_run.testing import ScriptedModel, Usage, error, shell, structured, text
from harness_run.vocab.pricing import price

from .conftest import HARNESSES, Agent, Harness

pytestmark = pytest.mark.harness

USAGE_KEYS = {"input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens", "reasoning_tokens"}
HARNESS_EVENTS = {"message", "thinking", "tool_use", "tool_result", "error"}


class Verdict(BaseModel):
    title: str
    score: int


async def test_a_turn_streams_started_first_and_result_last_with_full_accounting(
    harness: Harness, agent: Agent, model: ScriptedModel
) -> None:
    model.add(
        shell("printf 'made by the agent' > out.txt", usage={"input_tokens": 100, "output_tokens": 7}),
        text("all done", usage={"input_tokens": 200, "output_tokens": 9}),
    )
    engine = agent()
    session = engine.start_session()
    run = session.run("make the file", secrets=harness.secrets(model))
    streamed = [event async for event in run]
    result = await run

    assert not result.is_error, result.error
    assert (workspace_of(engine, session.session_id) / "out.txt").read_text() == "made by the agent"
    types = [e.type for e in run.events]
    assert [e for e in streamed if e.type != "delta"] == run.events  # deltas are live only
    streamed_text = "".join(e.text for e in streamed if isinstance(e, DeltaEvent))
    messages = "".join(e.text for e in run.events if isinstance(e, MessageEvent))
    assert streamed_text == (messages if harness.name == "claude-code" else "")  # docs/harnesses.md
    assert types[0] == "user"  # the prompt …
    first = next(e for e in run.events if e.type in HARNESS_EVENTS or isinstance(e, StatusEvent))
    while isinstance(first, SetupEvent):  # (workspace set-up steps)
        first = run.events[run.events.index(first) + 1]
    assert isinstance(first, StartedEvent), types  # … then the harness init
    assert (first.harness, first.model) == (harness.name, harness.model)
    assert types[-1] == "result" and types.count("result") == 1
    last = run.events[-1]
    assert isinstance(last, ResultEvent) and last.result == result
    assert types.index("tool_use") < types.index("tool_result") < types.index("message")

    assert (result.text, result.stop_reason, result.harness, result.model) == (
        "all done",
        "completed",
        harness.name,
        harness.model,
    )
    assert result.num_turns == 2  # model responses
    assert set(result.usage.model_dump()) == USAGE_KEYS
    assert (result.usage.input_tokens, result.usage.output_tokens) == (300, 16)
    assert result.cost_usd == pytest.approx(price(harness.model, result.usage), rel=1e-6)
    assert result.cost_usd and result.cost_usd > 0
    assert (result.session_id, result.turn) == (session.session_id, 1)
    assert result.native_session_id


async def test_send_resumes_the_session_with_its_history(
    harness: Harness, agent: Agent, model: ScriptedModel
) -> None:
    model.add(text("answer one bravo"), text("answer two charlie"))
    session = agent().start_session()
    one = await session.run("first prompt alpha", secrets=harness.secrets(model))
    two_run = session.send("second prompt delta", secrets=harness.secrets(model))
    two = await two_run

    assert (one.text, two.text) == ("answer one bravo", "answer two charlie")
    assert one.session_id == two.session_id == session.session_id
    assert one.native_session_id == two.native_session_id is not None
    assert (one.turn, two.turn) == (1, 2)
    first, second = model.main_requests
    assert first.last_user_text == "first prompt alpha"
    assert second.last_user_text == "second prompt delta"
    assert "first prompt alpha" in second.user_texts  # turn 2's request carries turn 1
    assert "answer one bravo" in second.text
    started = [e for e in two_run.events if isinstance(e, StartedEvent)]
    assert len(started) == 1 and two_run.events[-1].type == "result"
    assert [t.turn for t in session.history()] == [1, 2]


async def test_structured_output_is_validated_into_the_pydantic_model(
    harness: Harness, agent: Agent, model: ScriptedModel
) -> None:
    model.add(structured({"title": "looks fine", "score": 7}))
    session = agent(output_schema=Verdict).start_session()
    result = await session.run("judge it", secrets=harness.secrets(model))

    assert not result.is_error, result.error
    assert isinstance(result.structured_output, Verdict)
    assert result.structured_output == Verdict(title="looks fine", score=7)


async def test_an_api_error_is_an_error_result_and_the_session_stays_usable(
    harness: Harness, agent: Agent, model: ScriptedModel
) -> None:
    model.add(error(400, "scripted bad request qx17"), text("recovered"))
    session = agent().start_session()
    run = session.run("hello", secrets=harness.secrets(model))
    result = await run

    assert (result.is_error, result.stop_reason) == (True, "error")
    assert "scripted bad request qx17" in (result.error or "")
    assert "Traceback" not in (result.error or "")
    assert run.events[-1].type == "result"
    assert session.status == "failed"
    again = await session.send("again", secrets=harness.secrets(model))
    assert (again.is_error, again.text) == (False, "recovered"), again.error


async def test_max_turns_stops_the_turn_after_that_many_model_responses(
    harness: Harness, agent: Agent, model: ScriptedModel
) -> None:
    model.add(
        shell("printf one > one.txt"),
        shell("printf two > two.txt", delay=2.0),  # never acted on (a raced request gets no answer)
        text("never said"),
    )
    engine = agent(max_turns=1)
    session = engine.start_session()
    result = await session.run("work", secrets=harness.secrets(model))

    assert (result.stop_reason, result.is_error) == ("max_turns", True)
    assert "maximum number of turns (1)" in (result.error or "")
    assert result.num_turns == 1
    assert result.usage.input_tokens > 0  # the accounting is kept
    workspace = workspace_of(engine, session.session_id)
    assert (workspace / "one.txt").read_text() == "one"  # the first response's tool ran …
    assert not (workspace / "two.txt").exists()  # … the model was not asked again
    assert "never said" not in result.text
    assert session.stop_reason == "max_turns"


async def test_a_budget_stops_the_turn_once_its_cost_passes_it(
    harness: Harness, agent: Agent, model: ScriptedModel
) -> None:
    expensive = Usage(input_tokens=1_000_000, output_tokens=10)  # $1.25-$3 on these models
    model.add(
        shell("printf one > one.txt", usage=expensive),
        shell("printf two > two.txt", delay=2.0),
        text("never said"),
    )
    engine = agent(max_budget_usd=0.5)
    session = engine.start_session()
    started = time.monotonic()
    result = await session.run("work", secrets=harness.secrets(model))

    assert (result.stop_reason, result.is_error) == ("max_budget", True)
    assert "budget" in (result.error or "")
    assert result.usage.input_tokens >= 1_000_000  # usage and cost are kept
    assert result.cost_usd is not None and result.cost_usd > 0.5
    assert result.cost_usd == pytest.approx(price(harness.model, result.usage), rel=1e-6)
    assert not (workspace_of(engine, session.session_id) / "two.txt").exists()
    assert "never said" not in result.text
    assert time.monotonic() - started < harness.boot_s + 20


async def test_a_turn_timeout_stops_the_turn_and_its_processes(
    harness: Harness, agent: Agent, model: ScriptedModel
) -> None:
    marker = f"sleep 60.{uuid.uuid4().int % 10**6:06d}"  # in a bash -c: Claude Code refuses a bare sleep
    model.add(shell(f"bash -c '{marker}; echo finished'"), text("never said"))
    timeout = harness.boot_s + 3
    session = agent(timeout=timeout).start_session()
    started = time.monotonic()
    result = await session.run("sleep", secrets=harness.secrets(model))
    elapsed = time.monotonic() - started

    assert (result.stop_reason, result.is_error) == ("timeout", True)
    assert f"timed out after {timeout:g} s" in (result.error or "")
    assert elapsed < timeout + 10
    assert processes_with(marker) == {}
    assert session.status == "failed"


@pytest.mark.parametrize("harness", ["codex", "opencode"], indirect=True)
async def test_an_unpriced_model_has_no_cost_and_a_status_event_says_so(
    harness: Harness, agent: Agent, model: ScriptedModel
) -> None:
    # Claude Code prices every turn itself; Codex and OpenCode report no cost on this endpoint
    model.add(text("hi"))
    session = agent(model=harness.unknown_model).start_session()
    run = session.run("hello", secrets=harness.secrets(model))
    result = await run

    assert not result.is_error, result.error
    assert result.cost_usd is None
    assert result.usage.input_tokens > 0
    [note] = [e for e in run.events if isinstance(e, CostUnknownEvent)]
    assert (note.model, note.harness) == (harness.unknown_model, harness.name)
    assert harness.unknown_model in note.message


REFUSED = {
    "claude-code": [],  # Claude Code honours all of these natively
    "codex": [
        ({"allowed_tools": ["Bash"]}, "allowed_tools"),
        ({"disallowed_tools": ["Bash"]}, "disallowed_tools"),
        ({"model": HARNESSES["codex"].unknown_model, "max_budget_usd": 1.0}, "max_budget_usd"),
    ],
    "opencode": [
        ({"allowed_tools": ["Frobnicate"]}, "allowed_tools"),
        ({"disallowed_tools": ["Bash(rm:*)"]}, "disallowed_tools"),
        ({"model": HARNESSES["opencode"].unknown_model, "max_budget_usd": 1.0}, "max_budget_usd"),
    ],
}
HONOURED = {
    "claude-code": {"allowed_tools": ["Bash"], "disallowed_tools": ["WebFetch"], "max_budget_usd": 5.0},
    "codex": {"disallowed_tools": ["web_search"], "max_budget_usd": 5.0, "reasoning_effort": "low"},
    "opencode": {"allowed_tools": ["Bash"], "disallowed_tools": ["WebFetch"], "max_budget_usd": 5.0},
}


async def test_settings_a_harness_cannot_honour_are_refused_before_launch(
    harness: Harness, agent: Agent, model: ScriptedModel
) -> None:
    for fields, field in REFUSED[harness.name]:
        engine = agent(**fields)
        before = len(engine.list_sessions())
        with pytest.raises(UsageError) as caught:  # refused when the session starts: nothing stored
            engine.start_session()
        message = str(caught.value)
        assert field in message and harness.name in message, message
        assert len(engine.list_sessions()) == before
        # the same refusal when a turn's overlay brings the setting in
        plain = agent().start_session()
        with pytest.raises(UsageError, match=field):
            plain.run("hello", secrets=harness.secrets(model), config=TurnConfig(**fields))
    assert model.requests == []  # nothing was launched

    model.add(text("fine"))  # what it can honour runs
    session = agent(**HONOURED[harness.name]).start_session()
    result = await session.run("hello", secrets=harness.secrets(model))
    assert (result.is_error, result.text) == (False, "fine"), result.error


async def test_a_message_sent_during_a_turn_steers_it_or_is_refused_clearly(
    harness: Harness, agent: Agent, model: ScriptedModel
) -> None:
    marker = f"sleep 30.{uuid.uuid4().int % 10**6:06d}"
    model.add(shell(f"bash -c '{marker}; echo finished'"), text("never said"))
    session = agent().start_session()
    run = session.run("sleep", secrets=harness.secrets(model))
    await wait_until(lambda: processes_with(marker), within=60.0, what="the sleep command")
    driver = get_driver(harness.name)
    if driver.steering:
        assert session.send("also say steered-9031") is run  # delivered into the running turn
        await wait_until(
            lambda: any(isinstance(e, UserEvent) and "steered-9031" in e.text for e in run.events),
            what="the steer's user event",
        )
    else:
        with pytest.raises(UsageError, match="takes no message while a turn runs") as caught:
            session.send("also say steered-9031")
        assert "interrupt" in str(caught.value)
        assert not any(isinstance(e, UserEvent) and "steered" in e.text for e in run.events)
    await session.interrupt()
    result = await run
    assert result.stop_reason == "interrupted"
    assert processes_with(marker) == {}
