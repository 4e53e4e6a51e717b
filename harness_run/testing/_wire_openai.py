"""OpenAI rendering: Responses API (Codex) and Chat Completions (OpenCode), streamed and plain.

Usage mapping: OpenAI counts cached tokens inside the prompt total, so ``input_tokens`` /
``prompt_tokens`` = ``Usage.input_tokens + Usage.cache_read_tokens`` and ``cached_tokens`` =
``Usage.cache_read_tokens``; ``reasoning_tokens`` is reported as part of the output.
"""

from __future__ import annotations

import time
from typing import Any

from harness_run.testing._replies import Reply, Usage
from harness_run.testing._resolve import Out, TextOut, ToolOut
from harness_run.testing._sse import chunks, new_id, openai_error_type, sse

__all__ = ["chat_json", "chat_stream", "openai_error", "responses_json", "responses_stream"]


def openai_error(status: int, message: str, error_type: str | None = None) -> dict[str, Any]:
    """The OpenAI error body for ``status``."""
    return {
        "error": {
            "message": message,
            "type": error_type or openai_error_type(status),
            "param": None,
            "code": None,
        }
    }


# ---------------------------------------------------------------------------------------------
# Responses API
# ---------------------------------------------------------------------------------------------


def _responses_usage(u: Usage) -> dict[str, Any]:
    prompt = u.input_tokens + u.cache_read_tokens
    return {
        "input_tokens": prompt,
        "input_tokens_details": {"cached_tokens": u.cache_read_tokens},
        "output_tokens": u.output_tokens,
        "output_tokens_details": {"reasoning_tokens": u.reasoning_tokens},
        "total_tokens": prompt + u.output_tokens,
    }


def _responses_items(reply: Reply, outs: list[Out]) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = []
    if reply.thinking:
        items.append(
            {
                "type": "reasoning",
                "id": new_id("rs_"),
                "summary": [{"type": "summary_text", "text": reply.thinking}],
            }
        )
    for out in outs:
        if isinstance(out, TextOut):
            items.append(
                {
                    "type": "message",
                    "id": new_id("msg_"),
                    "status": "completed",
                    "role": "assistant",
                    "content": [{"type": "output_text", "text": out.text, "annotations": []}],
                }
            )
        else:
            items.append(
                {
                    "type": "function_call",
                    "id": new_id("fc_"),
                    "call_id": new_id("call_"),
                    "name": out.name,
                    "arguments": out.arguments_json,
                    "status": "completed",
                }
            )
    return items


def responses_json(reply: Reply, outs: list[Out], model: str) -> dict[str, Any]:
    """The non-streamed ``response`` object."""
    return {
        "id": new_id("resp_"),
        "object": "response",
        "created_at": int(time.time()),
        "status": "completed",
        "model": model,
        "output": _responses_items(reply, outs),
        "usage": _responses_usage(reply.usage),
    }


def _item_events(index: int, item: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """(event type, payload) pairs between ``output_item.added`` and ``output_item.done`` inclusive."""
    kind = item["type"]
    ref: dict[str, Any] = {"item_id": item["id"], "output_index": index}
    added: dict[str, Any]
    body: list[tuple[str, dict[str, Any]]]
    if kind == "message":
        text = item["content"][0]["text"]
        added = {**item, "status": "in_progress", "content": []}
        part: dict[str, Any] = {"type": "output_text", "text": "", "annotations": []}
        body = [("response.content_part.added", {**ref, "content_index": 0, "part": part})]
        body += [
            ("response.output_text.delta", {**ref, "content_index": 0, "delta": c}) for c in chunks(text)
        ]
        body += [
            ("response.output_text.done", {**ref, "content_index": 0, "text": text}),
            ("response.content_part.done", {**ref, "content_index": 0, "part": item["content"][0]}),
        ]
    elif kind == "function_call":
        added = {**item, "status": "in_progress", "arguments": ""}
        body = [
            ("response.function_call_arguments.delta", {**ref, "delta": c}) for c in chunks(item["arguments"])
        ]
        body.append(("response.function_call_arguments.done", {**ref, "arguments": item["arguments"]}))
    else:  # reasoning
        text = item["summary"][0]["text"]
        added = {**item, "summary": []}
        ref = {**ref, "summary_index": 0}
        body = [
            ("response.reasoning_summary_part.added", {**ref, "part": {"type": "summary_text", "text": ""}})
        ]
        body += [("response.reasoning_summary_text.delta", {**ref, "delta": c}) for c in chunks(text)]
        body += [
            ("response.reasoning_summary_text.done", {**ref, "text": text}),
            ("response.reasoning_summary_part.done", {**ref, "part": item["summary"][0]}),
        ]
    return [
        ("response.output_item.added", {"output_index": index, "item": added}),
        *body,
        ("response.output_item.done", {"output_index": index, "item": item}),
    ]


def responses_stream(reply: Reply, outs: list[Out], model: str) -> list[bytes]:
    """The SSE events of one streamed Responses answer (truncated after the first delta for ``drop()``)."""
    response = responses_json(reply, outs, model)
    pending: dict[str, Any] = {**response, "status": "in_progress", "output": [], "usage": None}
    pairs: list[tuple[str, dict[str, Any]]] = [
        ("response.created", {"response": pending}),
        ("response.in_progress", {"response": pending}),
    ]
    for index, item in enumerate(response["output"]):
        pairs += _item_events(index, item)
    pairs.append(("response.completed", {"response": response}))
    if reply.drop_connection:
        pairs = pairs[:4] if response["output"] else pairs[:2]
    return [
        sse({"type": kind, "sequence_number": n, **payload}, kind) for n, (kind, payload) in enumerate(pairs)
    ]


# ---------------------------------------------------------------------------------------------
# Chat Completions
# ---------------------------------------------------------------------------------------------


def _chat_usage(u: Usage) -> dict[str, Any]:
    prompt = u.input_tokens + u.cache_read_tokens
    return {
        "prompt_tokens": prompt,
        "completion_tokens": u.output_tokens,
        "total_tokens": prompt + u.output_tokens,
        "prompt_tokens_details": {"cached_tokens": u.cache_read_tokens},
        "completion_tokens_details": {"reasoning_tokens": u.reasoning_tokens},
    }


def _finish_reason(reply: Reply, outs: list[Out]) -> str:
    if reply.stop_reason:
        return reply.stop_reason
    return "tool_calls" if any(isinstance(o, ToolOut) for o in outs) else "stop"


def _tool_calls(outs: list[Out]) -> list[dict[str, Any]]:
    return [
        {
            "id": new_id("call_"),
            "type": "function",
            "function": {"name": o.name, "arguments": o.arguments_json},
        }
        for o in outs
        if isinstance(o, ToolOut)
    ]


def chat_json(reply: Reply, outs: list[Out], model: str) -> dict[str, Any]:
    """The non-streamed ``chat.completion`` object."""
    text = "".join(o.text for o in outs if isinstance(o, TextOut))
    message: dict[str, Any] = {"role": "assistant", "content": text or None}
    calls = _tool_calls(outs)
    if calls:
        message["tool_calls"] = calls
    if reply.thinking:
        message["reasoning_content"] = reply.thinking
    return {
        "id": new_id("chatcmpl-"),
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [{"index": 0, "message": message, "finish_reason": _finish_reason(reply, outs)}],
        "usage": _chat_usage(reply.usage),
    }


def _chat_deltas(reply: Reply, outs: list[Out]) -> list[dict[str, Any]]:
    deltas: list[dict[str, Any]] = [{"role": "assistant", "content": ""}]
    if reply.thinking:
        deltas += [{"reasoning_content": c} for c in chunks(reply.thinking)]
    tool_index = 0
    for out in outs:
        if isinstance(out, TextOut):
            deltas += [{"content": c} for c in chunks(out.text)]
            continue
        head = {
            "index": tool_index,
            "id": new_id("call_"),
            "type": "function",
            "function": {"name": out.name, "arguments": ""},
        }
        deltas.append({"tool_calls": [head]})
        deltas += [
            {"tool_calls": [{"index": tool_index, "function": {"arguments": c}}]}
            for c in chunks(out.arguments_json)
        ]
        tool_index += 1
    return deltas


def chat_stream(reply: Reply, outs: list[Out], model: str, *, include_usage: bool) -> list[bytes]:
    """The SSE chunks of one streamed Chat Completions answer, ending in ``data: [DONE]``.

    The usage chunk (empty ``choices``) is sent when ``stream_options.include_usage`` was asked for.
    For ``drop()`` only the first two chunks are returned.
    """
    base = {
        "id": new_id("chatcmpl-"),
        "object": "chat.completion.chunk",
        "created": int(time.time()),
        "model": model,
    }
    frames: list[dict[str, Any]] = [
        {**base, "choices": [{"index": 0, "delta": d, "finish_reason": None}]}
        for d in _chat_deltas(reply, outs)
    ]
    if reply.drop_connection:
        return [sse(f) for f in frames[:2]]
    frames.append(
        {**base, "choices": [{"index": 0, "delta": {}, "finish_reason": _finish_reason(reply, outs)}]}
    )
    if include_usage:
        frames.append({**base, "choices": [], "usage": _chat_usage(reply.usage)})
    return [*(sse(f) for f in frames), sse("[DONE]")]
