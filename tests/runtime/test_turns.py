"""One turn and a few turns of the real Claude Code against the scripted model: files, events,
result accounting, history carried between turns, per-session/turn settings, structured output."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import BaseModel

from harness_run.events import ResultEvent, ToolResultEvent, ToolUseEvent
from harness_run.spec import SessionConfig, SystemPrompt, TurnConfig
from harness_run.testing import ScriptedModel, Usage, shell, structured, text, write_file

from ._helpers import model_secrets, workspace_of
from .conftest import EngineFactory

pytestmark = pytest.mark.harness

USAGE_KEYS = {"input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens", "reasoning_tokens"}


@pytest.mark.parametrize(
    ("reply", "tool", "path", "content"),
    [
        (shell("printf 'hello from bash' > out.txt"), "Bash", "out.txt", "hello from bash"),
        (write_file("notes/hi.txt", "hello from write\n"), "Write", "notes/hi.txt", "hello from write\n"),
    ],
    ids=["shell", "write_file"],
)
async def test_a_tool_call_creates_a_file_and_the_result_is_accounted(
    model: ScriptedModel,
    make_engine: EngineFactory,
    cli_results: list[dict[str, Any]],
    reply: Any,
    tool: str,
    path: str,
    content: str,
) -> None:
    first = Usage(input_tokens=100, output_tokens=7, cache_read_tokens=5, cache_write_tokens=3)
    second = {"input_tokens": 200, "output_tokens": 9}
    model.add(reply.with_options(usage=first), text("all done", usage=second))
    engine = make_engine(checkpoint=True)
    session = engine.start_session()

    run = session.run("make the file", secrets=model_secrets(model))
    streamed = [event async for event in run]
    result = await run

    assert (workspace_of(engine, session.session_id) / path).read_text() == content
    # the events a user sees: prompt, tool call, its result, the answer, and the result last
    types = [e.type for e in run.events]
    assert types[0] == "user"
    assert types[-1] == "result"
    assert types.count("result") == 1
    uses = [e for e in run.events if isinstance(e, ToolUseEvent)]
    assert [u.name for u in uses] == [tool]
    results = [e for e in run.events if isinstance(e, ToolResultEvent)]
    assert [r.tool_use_id for r in results] == [uses[0].tool_use_id]
    assert not results[0].is_error
    assert [e.text for e in run.events if e.type == "message"] == ["all done"]
    assert types.index("tool_use") < types.index("tool_result") < types.index("message")
    assert [e.seq for e in run.events] == list(range(len(types)))
    # async iteration saw the same events, live, and the answer streamed as deltas before them
    assert [e for e in streamed if e.type != "delta"] == run.events
    assert "".join(e.text for e in streamed if e.type == "delta") == "all done"
    last = run.events[-1]
    assert isinstance(last, ResultEvent)
    assert last.result == result

    assert run.done
    assert run.status == "completed"
    assert run.result == result
    assert result.text == "all done"
    assert not result.is_error
    assert result.error is None
    assert result.stop_reason == "completed"
    assert result.num_turns == 2
    assert set(result.usage.model_dump()) == USAGE_KEYS
    assert (result.usage.input_tokens, result.usage.output_tokens) == (300, 16)
    assert (result.usage.cache_read_tokens, result.usage.cache_write_tokens) == (5, 3)
    [cli] = cli_results
    assert isinstance(result.cost_usd, float)
    assert result.cost_usd == cli["total_cost_usd"] > 0
    assert result.duration_s > 0
    # resource reporting: the CLI's CPU (it ran a shell command too) and its peak memory
    assert result.resources is not None
    assert 0 < result.resources.cpu_seconds < 60
    assert 20 < result.resources.peak_memory_mb < 4096
    assert result.session_id == session.session_id == run.session_id
    assert result.turn == 1
    assert result.harness == "claude-code"
    assert result.model == "claude-sonnet-4-6"
    assert session.status == "idle"
    assert session.last_result == result
    assert [r.outcome for r in model.requests if r.is_model_request] == ["script", "script"]


async def test_an_unknown_model_name_gets_the_clis_cost_not_a_made_up_zero(
    model: ScriptedModel,
    make_engine: EngineFactory,
    cli_results: list[dict[str, Any]],
) -> None:
    model.add(text("hi"))
    engine = make_engine(model="claude-scripted-unknown-9")
    result = await engine.start_session().run("hello", secrets=model_secrets(model))
    assert model.requests[0].model == "claude-scripted-unknown-9"
    [cli] = cli_results
    # our price table does not know this model: the figure must be the CLI's own (or None if it gave none)
    expected = cli.get("total_cost_usd")
    assert result.cost_usd == (float(expected) if isinstance(expected, int | float) else None)


async def test_send_continues_the_conversation_with_its_history(
    model: ScriptedModel,
    make_engine: EngineFactory,
) -> None:
    model.add(text("answer one bravo"), text("answer two charlie"))
    engine = make_engine()
    prompt = SystemPrompt.inherit(append="SESSION-PROMPT-MARK")
    session = engine.start_session(SessionConfig(system_prompt=prompt))

    one = await session.run("first prompt alpha", secrets=model_secrets(model))
    two = await session.send(
        "second prompt delta", secrets=model_secrets(model), config=TurnConfig(model="claude-haiku-4-5")
    )

    assert (one.text, two.text) == ("answer one bravo", "answer two charlie")
    assert (one.turn, two.turn) == (1, 2)
    assert one.session_id == two.session_id == session.session_id
    first, second = model.main_requests
    assert second.last_user_text == "second prompt delta"
    assert "first prompt alpha" in second.user_texts  # the first turn's prompt ...
    assert "answer one bravo" in second.text  # ... and answer travel with the second request
    assert second.model == "claude-haiku-4-5"
    assert first.model == "claude-sonnet-4-6"
    assert "SESSION-PROMPT-MARK" in first.system_text
    assert "SESSION-PROMPT-MARK" in second.system_text
    assert "You are Claude Code" in first.system_text  # inherit + append keeps the harness prompt
    history = session.history()
    assert [(t.turn, t.prompt) for t in history] == [(1, "first prompt alpha"), (2, "second prompt delta")]
    assert [t.settings["model"] for t in history] == ["claude-sonnet-4-6", "claude-haiku-4-5"]
    assert history[1].turn_config == {"model": "claude-haiku-4-5"}
    assert history[1].result == two
    assert session.last_result == two
    assert [e.turn for e in session.events() if e.type == "result"] == [1, 2]


async def test_max_turns_stops_the_turn_and_keeps_the_accounting(
    model: ScriptedModel,
    make_engine: EngineFactory,
    cli_results: list[dict[str, Any]],
) -> None:
    model.add(shell("echo one", usage={"input_tokens": 321, "output_tokens": 12}), text("never reached"))
    engine = make_engine(max_turns=1)
    result = await engine.start_session().run("needs two model calls", secrets=model_secrets(model))

    assert result.stop_reason == "max_turns"
    assert result.usage.input_tokens >= 321
    assert result.usage.output_tokens >= 12
    [cli] = cli_results
    assert cli["subtype"] == "error_max_turns"
    assert isinstance(result.cost_usd, float)
    assert result.cost_usd == cli["total_cost_usd"] > 0
    assert result.num_turns >= 1
    assert result.duration_s > 0
    assert model.remaining == 1  # the second model call never happened


class Verdict(BaseModel):
    title: str
    score: int


async def test_structured_output_is_validated_into_the_pydantic_model(
    model: ScriptedModel,
    make_engine: EngineFactory,
) -> None:
    model.add(structured({"title": "looks fine", "score": 7}))
    engine = make_engine(output_schema=Verdict)
    result = await engine.start_session().run("judge it", secrets=model_secrets(model))
    assert not result.is_error, result.error
    assert result.structured_output == Verdict(title="looks fine", score=7)
    assert isinstance(result.structured_output, Verdict)
    assert "StructuredOutput" in model.main_requests[0].tool_names


async def test_structured_output_with_a_json_schema_dict_is_a_dict(
    model: ScriptedModel,
    make_engine: EngineFactory,
) -> None:
    schema = {"type": "object", "properties": {"answer": {"type": "integer"}}, "required": ["answer"]}
    model.add(structured({"answer": 42}))
    engine = make_engine(output_schema=schema)
    result = await engine.start_session().run("answer", secrets=model_secrets(model))
    assert not result.is_error, result.error
    assert result.structured_output == {"answer": 42}
    assert type(result.structured_output) is dict


async def test_output_schema_for_one_turn_only(model: ScriptedModel, make_engine: EngineFactory) -> None:
    model.add(structured({"title": "turn one", "score": 1}), text("plain answer"))
    engine = make_engine()
    session = engine.start_session()
    one = await session.run(
        "structured please", secrets=model_secrets(model), config=TurnConfig(output_schema=Verdict)
    )
    two = await session.send("plain please", secrets=model_secrets(model))
    assert one.structured_output == Verdict(title="turn one", score=1)
    assert two.structured_output is None
    assert two.text == "plain answer"
    first, second = model.main_requests
    assert "StructuredOutput" in first.tool_names
    assert "StructuredOutput" not in second.tool_names
    assert session.history()[0].settings["output_schema"] == Verdict.model_json_schema()
    assert session.history()[1].settings["output_schema"] is None
