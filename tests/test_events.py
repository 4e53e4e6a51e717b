"""The event model and result types: stored forms round-trip, usage reads like a mapping."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from harness_run.events import (
    EVENT_TYPES,
    AgentEvent,
    ApprovalDecisionEvent,
    ApprovalRequestEvent,
    CostUnknownEvent,
    DeltaEvent,
    ErrorEvent,
    McpServerInfo,
    MessageEvent,
    QuestionAnswerEvent,
    QuestionEvent,
    ResourceUsage,
    ResultEvent,
    RetryEvent,
    RunResult,
    SetupEvent,
    StartedEvent,
    StatusEvent,
    ThinkingEvent,
    ToolResultEvent,
    ToolUseEvent,
    Usage,
    UserEvent,
    WarningEvent,
    parse_event,
)

RAW = {"type": "system", "subtype": "init", "nested": {"a": [1, 2]}}

EVENTS: list[AgentEvent] = [
    UserEvent(text="hi", message_id="m-1", seq=0, turn=2, ts=1.5),
    SetupEvent(step="cloning https://example.com/repo.git", seq=1, turn=2),
    StartedEvent(
        harness="claude-code",
        model="claude-haiku-4-5",
        native_session_id="sess-1",
        tools=("Bash", "Read"),
        mcp_servers=(McpServerInfo(name="github", status="connected"), McpServerInfo(name="db")),
        skills=("zebra-counter",),
        harness_version="2.1.332",
        permission_mode="default",
        ignored=("reasoning_effort",),
        raw=RAW,
    ),
    MessageEvent(text="hello", message_id="msg_1"),
    DeltaEvent(text="hel", message_id="msg_1"),
    ThinkingEvent(text="hmm"),
    ToolUseEvent(tool_use_id="t1", name="Bash", input={"command": "ls", "nested": {"x": [1]}}),
    ToolResultEvent(tool_use_id="t1", content="a.txt", is_error=True),
    ApprovalRequestEvent(
        request_id="r1", tool="Bash", command="git push", input={"command": "git push"}, expires_at=9.0
    ),
    ApprovalDecisionEvent(request_id="r1", decision="deny", by="client", reason="not today", key_id="k1"),
    QuestionEvent(request_id="q1", question="Which branch?", options=["main", "dev"], expires_at=9.0),
    QuestionAnswerEvent(request_id="q1", answer="main", by="client"),
    RetryEvent(message="overloaded", attempt=2, max_attempts=10, delay_s=1.25, http_status=529),
    WarningEvent(message="config warning"),
    CostUnknownEvent(model="gpt-unknown", harness="codex", message="no price"),
    ErrorEvent(message="boom"),
    ResultEvent(
        result=RunResult(
            text="done",
            structured_output={"score": 7},
            stop_reason="max_turns",
            usage=Usage(input_tokens=3, reasoning_tokens=1),
            cost_usd=None,
            resources=ResourceUsage(cpu_seconds=0.5, peak_memory_mb=12.0),
        )
    ),
]


def test_every_event_type_is_exercised() -> None:
    assert {type(e) for e in EVENTS} == set(EVENT_TYPES)
    assert len({e.type for e in EVENTS}) == len(EVENT_TYPES)  # one tag per class


@pytest.mark.parametrize("event", EVENTS, ids=lambda e: e.type)
def test_events_round_trip_through_their_stored_form(event: AgentEvent) -> None:
    assert parse_event(event.model_dump(mode="json")) == event
    assert parse_event(event.model_dump_json()) == event
    again = parse_event(event.model_dump_json())
    assert type(again) is type(event)


def test_events_are_frozen_and_refuse_unknown_fields() -> None:
    event = WarningEvent(message="w")
    with pytest.raises(ValidationError):
        event.message = "changed"  # type: ignore[misc]
    with pytest.raises(ValidationError, match="detail"):
        parse_event({"type": "warning", "message": "w", "detail": {}})
    with pytest.raises(ValidationError, match="does not match any of the expected tags"):
        parse_event({"type": "nonsense"})


def test_the_notices_about_a_run_share_the_status_base_class() -> None:
    notices = [e for e in EVENTS if isinstance(e, StatusEvent)]
    assert [e.type for e in notices] == ["setup", "started", "retry", "warning", "cost_unknown"]


def test_status_events_of_earlier_versions_are_read_as_typed_events() -> None:
    """History stored (or a worker image built) before the status kinds had their own types."""
    started = parse_event(
        {
            "seq": 3,
            "turn": 1,
            "ts": 9.0,
            "type": "status",
            "status": "started",
            "detail": {
                "model": "claude-haiku-4-5",
                "tools": ["Bash"],
                "mcp_servers": [{"name": "marker", "status": "connected", "source": "x"}],
                "claude_code_version": "2.1.0",
                "permissionMode": "default",
                "session_id": "sess-1",
                "skills": ["zebra"],
            },
        }
    )
    assert started == StartedEvent(
        seq=3,
        turn=1,
        ts=9.0,
        harness="claude-code",
        model="claude-haiku-4-5",
        native_session_id="sess-1",
        tools=("Bash",),
        mcp_servers=(McpServerInfo(name="marker", status="connected"),),
        skills=("zebra",),
        harness_version="2.1.0",
        permission_mode="default",
    )
    codex = parse_event(
        {
            "type": "status",
            "status": "started",
            "detail": {"thread_id": "t-1", "model": "m", "mcp_servers": ["db"]},
        }
    )
    assert isinstance(codex, StartedEvent)
    assert (codex.harness, codex.native_session_id, codex.mcp_servers) == (
        "codex",
        "t-1",
        (McpServerInfo(name="db"),),
    )

    def legacy(status: str, **detail: object) -> AgentEvent:
        return parse_event({"type": "status", "status": status, "detail": detail})

    assert legacy("setup", step="cloning x") == SetupEvent(step="cloning x")
    assert legacy("warning", message="careful") == WarningEvent(message="careful")
    assert legacy("cost_unknown", model="m", message="no price") == CostUnknownEvent(
        model="m", harness="", message="no price"
    )
    assert legacy(
        "retry", attempt=1, max_retries=10, retry_delay_ms=500, error_status=529, error="overloaded"
    ) == (RetryEvent(message="overloaded", attempt=1, max_attempts=10, delay_s=0.5, http_status=529))
    assert legacy("retry", message="Reconnecting... 1/5") == RetryEvent(message="Reconnecting... 1/5")


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
