"""The event model and result types: stored forms round-trip, usage reads like a mapping."""

from __future__ import annotations

import pytest

from harness_run.events import (
    ErrorEvent,
    MessageEvent,
    ResultEvent,
    RunResult,
    StatusEvent,
    ThinkingEvent,
    ToolResultEvent,
    ToolUseEvent,
    Usage,
    UserEvent,
    parse_event,
)

EVENTS = [
    StatusEvent(status="started", detail={"model": "m"}),
    UserEvent(text="hi"),
    MessageEvent(text="hello", message_id="msg_1"),
    ThinkingEvent(text="hmm"),
    ToolUseEvent(tool_use_id="t1", name="Bash", input={"command": "ls"}),
    ToolResultEvent(tool_use_id="t1", content="a.txt", is_error=False),
    ErrorEvent(message="boom"),
    ResultEvent(result=RunResult(text="done", usage=Usage(input_tokens=3), cost_usd=None)),
]


@pytest.mark.parametrize("event", EVENTS, ids=lambda e: e.type)
def test_events_round_trip_through_their_stored_form(event: object) -> None:
    assert parse_event(event.model_dump(mode="json")) == event  # type: ignore[attr-defined]


def test_usage_has_the_same_five_keys_and_reads_like_a_mapping() -> None:
    usage = Usage(input_tokens=10, output_tokens=5, cache_read_tokens=2)
    assert list(usage.keys()) == [
        "input_tokens",
        "output_tokens",
        "cache_read_tokens",
        "cache_write_tokens",
        "reasoning_tokens",
    ]
    assert usage["input_tokens"] == 10
    assert dict(usage) == usage.model_dump()
    assert usage.get("nope") is None
    with pytest.raises(KeyError):
        usage["nope"]
    assert (usage + Usage(input_tokens=1)).input_tokens == 11
    assert usage.total_tokens == 17


def test_unknown_cost_is_none_not_zero() -> None:
    assert RunResult().cost_usd is None
