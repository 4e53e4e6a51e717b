"""The scripted model's wire output for all three APIs, checked with a plain HTTP client."""

from __future__ import annotations

import contextlib
import http.client
import json
import threading
import time
from typing import Any

import pytest

from harness_run.errors import UsageError
from harness_run.testing import (
    EXHAUSTED_TEXT,
    SIDE_REPLY_TEXT,
    Reply,
    Rule,
    ScriptedModel,
    Usage,
    combine,
    drop,
    error,
    shell,
    structured,
    text,
    tool_call,
    write_file,
)

from ._scripted_helpers import get, post, sse_events

ANTHROPIC_TOOLS = [{"name": "Bash", "input_schema": {}}, {"name": "Write", "input_schema": {}}]
CODEX_TOOLS = [{"type": "function", "name": "exec_command", "parameters": {}}]
OPENCODE_TOOLS = [
    {"type": "function", "function": {"name": n, "parameters": {}}} for n in ("bash", "write", "read")
]


def anthropic_body(prompt: str = "hi", *, stream: bool = True, **extra: Any) -> dict[str, Any]:
    return {
        "model": "claude-sonnet-4-6",
        "max_tokens": 1000,
        "stream": stream,
        "tools": ANTHROPIC_TOOLS,
        "system": [{"type": "text", "text": "You are Claude Code."}],
        "messages": [{"role": "user", "content": [{"type": "text", "text": prompt}]}],
        **extra,
    }


def chat_body(prompt: str = "hi", *, stream: bool = True, tools: Any = OPENCODE_TOOLS) -> dict[str, Any]:
    body: dict[str, Any] = {
        "model": "m",
        "stream": stream,
        "messages": [
            {"role": "system", "content": "You are opencode. Working directory: /work/ws"},
            {"role": "user", "content": prompt},
        ],
    }
    if stream:
        body["stream_options"] = {"include_usage": True}
    if tools:
        body["tools"] = tools
    return body


def responses_body(prompt: str = "hi", *, tools: Any = CODEX_TOOLS, stream: bool = True) -> dict[str, Any]:
    return {
        "model": "gpt-5",
        "instructions": "You are Codex.",
        "stream": stream,
        "tools": tools,
        "input": [{"type": "message", "role": "user", "content": [{"type": "input_text", "text": prompt}]}],
    }


# ---------------------------------------------------------------------------------------------
# Anthropic Messages
# ---------------------------------------------------------------------------------------------


def test_anthropic_stream_event_sequence_and_usage() -> None:
    usage = Usage(input_tokens=111, output_tokens=22, cache_read_tokens=5, cache_write_tokens=7)
    with ScriptedModel([text("hello " * 20, thinking="hmm", usage=usage)]) as model:
        status, headers, raw = post(f"{model.url}/v1/messages?beta=true", anthropic_body())
    assert status == 200
    assert headers["content-type"].startswith("text/event-stream")
    events = sse_events(raw)
    names = [n for n, _ in events]
    assert names[0] == "message_start"
    assert names[-2:] == ["message_delta", "message_stop"]
    assert all(n == d["type"] for n, d in events)
    starts = [d["content_block"]["type"] for n, d in events if n == "content_block_start"]
    assert starts == ["thinking", "text"]
    deltas = [d["delta"] for n, d in events if n == "content_block_delta"]
    assert "".join(d["text"] for d in deltas if d["type"] == "text_delta") == "hello " * 20
    assert "".join(d["thinking"] for d in deltas if d["type"] == "thinking_delta") == "hmm"
    final = events[-2][1]
    assert final["delta"]["stop_reason"] == "end_turn"
    assert final["usage"] == {
        "input_tokens": 111,
        "output_tokens": 22,
        "cache_read_input_tokens": 5,
        "cache_creation_input_tokens": 7,
    }
    assert events[0][1]["message"]["model"] == "claude-sonnet-4-6"


def test_anthropic_tool_calls_stream_input_json_and_stop_reason() -> None:
    reply = combine(text("running"), shell("echo a"), tool_call("Read", {"file_path": "/x"}))
    with ScriptedModel([reply]) as model:
        _, _, raw = post(f"{model.url}/v1/messages", anthropic_body())
    events = sse_events(raw)
    blocks: dict[int, dict[str, Any]] = {}
    for name, data in events:
        if name == "content_block_start":
            blocks[data["index"]] = {**data["content_block"], "json": ""}
        elif name == "content_block_delta" and data["delta"]["type"] == "input_json_delta":
            blocks[data["index"]]["json"] += data["delta"]["partial_json"]
    tools = [(b["name"], json.loads(b["json"])) for b in blocks.values() if b["type"] == "tool_use"]
    assert tools == [("Bash", {"command": "echo a"}), ("Read", {"file_path": "/x"})]
    assert events[-2][1]["delta"]["stop_reason"] == "tool_use"


def test_anthropic_plain_json_count_tokens_models_and_404() -> None:
    with ScriptedModel([write_file("a.txt", "x")]) as model:
        body = anthropic_body(stream=False)
        body["messages"][0]["content"].insert(
            0,
            {"type": "text", "text": "<system-reminder>\nPrimary working directory: /ws\n</system-reminder>"},
        )
        status, _, raw = post(f"{model.url}/v1/messages", body)
        message = json.loads(raw)
        assert status == 200
        assert message["type"] == "message"
        assert message["stop_reason"] == "tool_use"
        assert message["content"][0]["name"] == "Write"
        assert message["content"][0]["input"] == {"file_path": "/ws/a.txt", "content": "x"}
        status, _, raw = post(f"{model.url}/v1/messages/count_tokens", {"messages": []})
        assert status == 200
        assert json.loads(raw)["input_tokens"] > 0
        status, raw = get(f"{model.url}/v1/models")
        assert status == 200
        assert json.loads(raw)["data"][0]["id"] == "scripted-model"
        status, _, raw = post(f"{model.url}/v1/nope", {}, headers={"anthropic-version": "2023-06-01"})
        assert status == 404
        assert json.loads(raw)["error"]["type"] == "not_found_error"
        status, raw = get(f"{model.url}/v2/what")
        assert status == 404
        assert "error" in json.loads(raw)
        assert model.remaining == 0
        assert [r.outcome for r in model.requests] == [
            "script",
            "endpoint",
            "endpoint",
            "not_found",
            "not_found",
        ]


def test_error_replies_use_each_api_shape() -> None:
    with ScriptedModel([error(529, "busy"), error(500, "boom"), error(400, "bad")]) as model:
        status, _, raw = post(f"{model.url}/v1/messages", anthropic_body())
        assert status == 529
        assert json.loads(raw)["error"] == {"type": "overloaded_error", "message": "busy"}
        status, _, raw = post(f"{model.openai_url}/responses", responses_body())
        assert status == 500
        assert json.loads(raw)["error"]["message"] == "boom"
        status, _, raw = post(f"{model.openai_url}/chat/completions", chat_body())
        assert status == 400
        assert json.loads(raw)["error"]["type"] == "invalid_request_error"


def test_sticky_failure_answers_identical_retries_without_consuming() -> None:
    with ScriptedModel([error(500, "boom"), text("after")]) as model:
        assert post(f"{model.url}/v1/messages", anthropic_body("a"))[0] == 500
        assert post(f"{model.url}/v1/messages", anthropic_body("a", stream=False))[0] == 500  # a retry
        _, _, raw = post(f"{model.url}/v1/messages", anthropic_body("b", stream=False))
        assert json.loads(raw)["content"][0]["text"] == "after"
        assert [r.outcome for r in model.requests] == ["script", "retry", "script"]
    with ScriptedModel([error(500, "boom", sticky=False), text("recovered")]) as model:
        post(f"{model.url}/v1/messages", anthropic_body("a"))
        _, _, raw = post(f"{model.url}/v1/messages", anthropic_body("a", stream=False))
        assert json.loads(raw)["content"][0]["text"] == "recovered"


def test_drop_cuts_the_stream_midway() -> None:
    with ScriptedModel([drop("partial")]) as model:
        conn = http.client.HTTPConnection("127.0.0.1", model.port, timeout=10)
        conn.request(
            "POST", "/v1/messages", json.dumps(anthropic_body()), {"content-type": "application/json"}
        )
        resp = conn.getresponse()
        assert resp.status == 200
        with pytest.raises(http.client.IncompleteRead) as info:
            resp.read()
        conn.close()
    seen = info.value.partial.decode()
    assert "message_start" in seen
    assert "partial" in seen
    assert "message_stop" not in seen


def test_delay_and_exhaustion_and_stop_wakes_delays() -> None:
    with ScriptedModel([text("slow", delay=0.3)]) as model:
        started = time.monotonic()
        post(f"{model.url}/v1/messages", anthropic_body(stream=False))
        assert time.monotonic() - started >= 0.3
        _, _, raw = post(f"{model.url}/v1/messages", anthropic_body(stream=False))
        assert json.loads(raw)["content"][0]["text"] == EXHAUSTED_TEXT
        assert model.exhausted
        assert model.requests[-1].outcome == "exhausted"
    model = ScriptedModel([text("never", delay=30)]).start()

    def call() -> None:
        with contextlib.suppress(OSError, http.client.HTTPException):
            post(f"{model.url}/v1/messages", anthropic_body())

    worker = threading.Thread(target=call, daemon=True)
    worker.start()
    time.sleep(0.2)
    started = time.monotonic()
    model.stop()
    worker.join(5)
    assert time.monotonic() - started < 5
    assert not worker.is_alive()


# ---------------------------------------------------------------------------------------------
# OpenAI Responses (Codex)
# ---------------------------------------------------------------------------------------------


def test_responses_stream_text_shape() -> None:
    with ScriptedModel(
        [
            text(
                "hi there",
                thinking="plan",
                usage={"input_tokens": 9, "output_tokens": 4, "cache_read_tokens": 3},
            )
        ]
    ) as model:
        status, _, raw = post(f"{model.openai_url}/responses", responses_body())
    assert status == 200
    events = sse_events(raw)
    types = [d["type"] for _, d in events]
    assert all(n == d["type"] for n, d in events)
    assert types[0] == "response.created"
    assert types[-1] == "response.completed"
    added = [d["item"]["type"] for _, d in events if d["type"] == "response.output_item.added"]
    assert added == ["reasoning", "message"]
    assert "".join(d["delta"] for _, d in events if d["type"] == "response.output_text.delta") == "hi there"
    done = [d["item"] for _, d in events if d["type"] == "response.output_item.done"]
    assert done[1]["content"][0] == {"type": "output_text", "text": "hi there", "annotations": []}
    completed = events[-1][1]["response"]
    assert completed["status"] == "completed"
    assert completed["id"]
    assert completed["usage"]["input_tokens"] == 12
    assert completed["usage"]["input_tokens_details"]["cached_tokens"] == 3
    assert completed["usage"]["output_tokens"] == 4
    assert completed["usage"]["total_tokens"] == 16
    assert [d["sequence_number"] for _, d in events] == list(range(len(events)))


@pytest.mark.parametrize(
    ("offered", "expected"),
    [
        (["exec_command"], ("exec_command", {"cmd": "ls -la"})),
        (["shell_command"], ("shell_command", {"command": "ls -la"})),
        (["shell"], ("shell", {"command": ["bash", "-lc", "ls -la"]})),
        ([], ("exec_command", {"cmd": "ls -la"})),
    ],
)
def test_responses_shell_intent_picks_the_offered_tool(offered: list[str], expected: tuple[str, Any]) -> None:
    tools = [{"type": "function", "name": n, "parameters": {}} for n in offered]
    with ScriptedModel([shell("ls -la")]) as model:
        _, _, raw = post(f"{model.openai_url}/responses", responses_body(tools=tools))
    events = sse_events(raw)
    args = "".join(d["delta"] for _, d in events if d["type"] == "response.function_call_arguments.delta")
    item = next(d["item"] for _, d in events if d["type"] == "response.output_item.done")
    assert item["type"] == "function_call"
    assert item["call_id"].startswith("call_")
    assert (item["name"], json.loads(args)) == expected
    assert json.loads(item["arguments"]) == expected[1]


def test_responses_write_file_uses_shell_and_structured_is_json_text() -> None:
    with ScriptedModel([write_file("d/a b.txt", "it's\n"), structured({"ok": True})]) as model:
        _, _, raw = post(f"{model.openai_url}/responses", responses_body())
        item = next(d["item"] for _, d in sse_events(raw) if d["type"] == "response.output_item.done")
        assert item["name"] == "exec_command"
        assert (
            json.loads(item["arguments"])["cmd"] == "mkdir -p d && printf '%s' 'it'\"'\"'s\n' > 'd/a b.txt'"
        )
        _, _, raw = post(f"{model.openai_url}/responses", responses_body(stream=False))
        assert json.loads(json.loads(raw)["output"][0]["content"][0]["text"]) == {"ok": True}


# ---------------------------------------------------------------------------------------------
# Chat Completions (OpenCode)
# ---------------------------------------------------------------------------------------------


def test_chat_stream_tool_calls_and_usage_chunk() -> None:
    reply = combine(shell("echo 1"), write_file("x.py", "print(1)"))
    with ScriptedModel([reply.with_options(usage={"input_tokens": 30, "output_tokens": 6})]) as model:
        status, _, raw = post(f"{model.openai_url}/chat/completions", chat_body())
    assert status == 200
    events = sse_events(raw)
    assert events[-1] == (None, "[DONE]")
    chunks = [d for _, d in events[:-1]]
    assert all(c["object"] == "chat.completion.chunk" for c in chunks)
    calls: dict[int, dict[str, str]] = {}
    for c in chunks:
        for choice in c["choices"]:
            for tc in choice["delta"].get("tool_calls", []):
                entry = calls.setdefault(tc["index"], {"name": "", "args": ""})
                entry["name"] += tc.get("function", {}).get("name", "")
                entry["args"] += tc.get("function", {}).get("arguments", "")
    assert calls[0]["name"] == "bash"
    assert json.loads(calls[0]["args"])["command"] == "echo 1"
    assert "description" in json.loads(calls[0]["args"])
    assert (calls[1]["name"], json.loads(calls[1]["args"])) == (
        "write",
        {"filePath": "/work/ws/x.py", "content": "print(1)"},
    )
    finish = [ch["finish_reason"] for c in chunks for ch in c["choices"] if ch["finish_reason"]]
    assert finish == ["tool_calls"]
    assert chunks[-1]["choices"] == []
    assert chunks[-1]["usage"]["prompt_tokens"] == 30
    assert chunks[-1]["usage"]["completion_tokens"] == 6


def test_chat_plain_json_and_no_usage_chunk_unless_asked() -> None:
    with ScriptedModel([text("plain"), text("streamed")]) as model:
        _, _, raw = post(f"{model.openai_url}/chat/completions", chat_body(stream=False))
        completion = json.loads(raw)
        assert completion["object"] == "chat.completion"
        assert completion["choices"][0]["message"] == {"role": "assistant", "content": "plain"}
        assert completion["choices"][0]["finish_reason"] == "stop"
        assert completion["usage"]["total_tokens"] > 0
        body = chat_body()
        del body["stream_options"]
        _, _, raw = post(f"{model.openai_url}/chat/completions", body)
        assert all("usage" not in d for _, d in sse_events(raw)[:-1])


def test_opencode_title_request_is_a_side_request() -> None:
    title = {
        "model": "m",
        "stream": True,
        "messages": [
            {"role": "system", "content": "You are a title generator. You output ONLY a thread title."},
            {"role": "user", "content": "make me a file"},
        ],
    }
    with ScriptedModel([text("main answer")]) as model:
        _, _, raw = post(f"{model.openai_url}/chat/completions", title)
        side = "".join(
            c["choices"][0]["delta"].get("content", "") for _, c in sse_events(raw)[:-1] if c["choices"]
        )
        assert side == SIDE_REPLY_TEXT
        _, _, raw = post(f"{model.openai_url}/chat/completions", chat_body(stream=False))
        assert json.loads(raw)["choices"][0]["message"]["content"] == "main answer"
        assert [r.outcome for r in model.requests] == ["side", "script"]
        assert len(model.side_requests) == 1
        assert len(model.main_requests) == 1
    with ScriptedModel([text("main answer")], side_detector=None) as model:  # detection off
        post(f"{model.openai_url}/chat/completions", title)
        assert model.requests[0].outcome == "script"


def test_claude_quota_probe_is_a_side_request() -> None:
    probe = {"model": "claude-haiku-4-5", "max_tokens": 1, "messages": [{"role": "user", "content": "quota"}]}
    with ScriptedModel([text("x")]) as model:
        post(f"{model.url}/v1/messages", probe)
        assert model.requests[0].is_side
        assert model.remaining == 1


# ---------------------------------------------------------------------------------------------
# rules, recording, env
# ---------------------------------------------------------------------------------------------


def test_rules_match_before_the_queue_and_respect_tool_result_and_times() -> None:
    rules = [
        Rule(match="file", reply=shell("touch f")),
        Rule(tool_result=True, reply=text("tool done")),
        Rule(match=lambda r: "bye" in r.last_user_text, reply=text("ciao"), times=1),
    ]
    with ScriptedModel([text("queued"), *rules]) as model:

        def ask(prompt: str, tool_result: bool = False) -> str:
            body = anthropic_body(prompt, stream=False)
            if tool_result:
                body["messages"] += [
                    {
                        "role": "assistant",
                        "content": [{"type": "tool_use", "id": "t1", "name": "Bash", "input": {}}],
                    },
                    {
                        "role": "user",
                        "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "ok"}],
                    },
                ]
            content = json.loads(post(f"{model.url}/v1/messages", body)[2])["content"][0]
            return content.get("text") or content["name"]

        assert ask("make a file") == "Bash"
        assert ask("make a file", tool_result=True) == "tool done"
        assert ask("bye") == "ciao"
        assert ask("bye") == "queued"
        assert ask("bye") == EXHAUSTED_TEXT
        assert [r.rule_index for r in model.requests] == [0, 1, 2, None, None]
        assert model.requests[1].has_tool_result
        assert model.requests[1].tool_results == ["ok"]
        assert model.requests[1].tool_calls == [("Bash", "{}")]


def test_recorded_request_helpers_and_header_redaction() -> None:
    with ScriptedModel() as model:
        model.add(text("ok"))
        body = anthropic_body("do the thing")
        body["messages"][0]["content"].insert(
            0, {"type": "text", "text": "<system-reminder>\nctx\n</system-reminder>"}
        )
        post(
            f"{model.url}/v1/messages?beta=true",
            body,
            headers={"x-api-key": "sk-secret-value", "authorization": "Bearer sk-secret-value"},
        )
        req = model.requests[0]
    assert req.api == "anthropic"
    assert req.query == "beta=true"
    assert req.path == "/v1/messages"
    assert req.headers["x-api-key"] == "***"
    assert req.headers["authorization"] == "***"
    assert "sk-secret-value" not in json.dumps(req.headers)
    assert req.last_user_text == "do the thing"
    assert "ctx" in req.text
    assert "do the thing" in req.text
    assert req.tool_names == ["Bash", "Write"]
    assert req.system_text == "You are Claude Code."
    assert req.model == "claude-sonnet-4-6"
    assert req.stream


def test_env_for_each_harness_and_config_helpers() -> None:
    with ScriptedModel() as model:
        env = model.env_for("claude-code")
        assert env["ANTHROPIC_BASE_URL"] == model.url
        assert not model.url.endswith("/v1")
        for key in (
            "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC",
            "DISABLE_AUTOUPDATER",
            "DISABLE_TELEMETRY",
            "DISABLE_ERROR_REPORTING",
        ):
            assert env[key] == "1"
        assert env["ANTHROPIC_API_KEY"]
        for harness in ("codex", "opencode"):
            assert model.env_for(harness)["OPENAI_BASE_URL"] == model.openai_url
            assert model.env_for(harness)["OPENAI_API_KEY"]
        assert f'model_providers.scripted.base_url="{model.openai_url}"' in model.codex_config_overrides()
        assert model.opencode_config()["provider"]["scripted"]["options"]["baseURL"] == model.openai_url
        with pytest.raises(UsageError, match="unknown harness"):
            model.env_for("gemini")
    with pytest.raises(UsageError, match="not started"):
        _ = model.url


def test_reply_validation() -> None:
    with pytest.raises(ValueError, match="400-599"):
        error(200, "no")
    with pytest.raises(ValueError, match="unknown usage"):
        text("x", usage={"tokens": 1})
    with pytest.raises(ValueError, match="cannot be combined"):
        combine(text("a"), drop())
    with pytest.raises(TypeError, match="use text"):
        ScriptedModel(["hello"])  # type: ignore[list-item]
    assert Reply.text("a").then(shell("b")).describe() == "text('a') + shell('b')"


def test_a_failing_rule_predicate_answers_500_instead_of_hanging() -> None:
    def broken(request: object) -> bool:
        raise RuntimeError("predicate bug")

    with ScriptedModel([Rule(match=broken, reply=text("never"))]) as model:
        status, _, raw = post(f"{model.url}/v1/messages", anthropic_body())
        assert status == 500
        assert "predicate bug" in json.loads(raw)["error"]["message"]
        assert model.requests[0].outcome == "failed"
        assert model.requests[0].failure == "RuntimeError: predicate bug"
