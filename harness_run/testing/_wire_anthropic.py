"""Anthropic Messages API rendering: SSE events, the plain JSON message and the error body."""

from __future__ import annotations

import json
from typing import Any

from harness_run.testing._replies import Reply, Usage
from harness_run.testing._resolve import Out, TextOut, ToolOut
from harness_run.testing._sse import anthropic_error_type, chunks, new_id, sse

__all__ = ["anthropic_error", "anthropic_json", "anthropic_stream"]


def _usage(usage: Usage, *, output: int | None = None) -> dict[str, Any]:
    return {
        "input_tokens": usage.input_tokens,
        "cache_creation_input_tokens": usage.cache_write_tokens,
        "cache_read_input_tokens": usage.cache_read_tokens,
        "output_tokens": usage.output_tokens if output is None else output,
    }


def _stop_reason(reply: Reply, outs: list[Out]) -> str:
    if reply.stop_reason:
        return reply.stop_reason
    return "tool_use" if any(isinstance(o, ToolOut) for o in outs) else "end_turn"


def _blocks(reply: Reply, outs: list[Out]) -> list[dict[str, Any]]:
    blocks: list[dict[str, Any]] = []
    if reply.thinking:
        blocks.append({"type": "thinking", "thinking": reply.thinking, "signature": "scripted"})
    for out in outs:
        if isinstance(out, TextOut):
            blocks.append({"type": "text", "text": out.text})
        else:
            blocks.append(
                {"type": "tool_use", "id": new_id("toolu_"), "name": out.name, "input": out.arguments}
            )
    return blocks


def anthropic_json(reply: Reply, outs: list[Out], model: str) -> dict[str, Any]:
    """The non-streamed ``message`` object."""
    return {
        "id": new_id("msg_"),
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": _blocks(reply, outs),
        "stop_reason": _stop_reason(reply, outs),
        "stop_sequence": None,
        "usage": _usage(reply.usage),
    }


def _block_events(index: int, block: dict[str, Any]) -> list[bytes]:
    kind = block["type"]
    start: dict[str, Any]
    if kind == "thinking":
        start = {"type": "thinking", "thinking": "", "signature": ""}
        deltas = [{"type": "thinking_delta", "thinking": c} for c in chunks(block["thinking"])]
        deltas.append({"type": "signature_delta", "signature": block["signature"]})
    elif kind == "text":
        start = {"type": "text", "text": ""}
        deltas = [{"type": "text_delta", "text": c} for c in chunks(block["text"])]
    else:
        start = {"type": "tool_use", "id": block["id"], "name": block["name"], "input": {}}
        deltas = [{"type": "input_json_delta", "partial_json": c} for c in chunks(json.dumps(block["input"]))]
    events = [
        sse({"type": "content_block_start", "index": index, "content_block": start}, "content_block_start")
    ]
    events += [
        sse({"type": "content_block_delta", "index": index, "delta": d}, "content_block_delta")
        for d in deltas
    ]
    events.append(sse({"type": "content_block_stop", "index": index}, "content_block_stop"))
    return events


def anthropic_stream(reply: Reply, outs: list[Out], model: str) -> list[bytes]:
    """The SSE events of one streamed answer. For ``drop()`` only the first events (the server then
    cuts the connection): ``message_start`` and, with partial text, that block's start and delta."""
    message = anthropic_json(reply, outs, model)
    start_msg: dict[str, Any] = {
        **message,
        "content": [],
        "stop_reason": None,
        "usage": _usage(reply.usage, output=1),
    }
    events = [sse({"type": "message_start", "message": start_msg}, "message_start")]
    if reply.drop_connection:
        for index, block in enumerate(message["content"]):
            events += _block_events(index, block)[:2]
            break
        return events
    events.append(sse({"type": "ping"}, "ping"))
    for index, block in enumerate(message["content"]):
        events += _block_events(index, block)
    delta = {
        "type": "message_delta",
        "delta": {"stop_reason": message["stop_reason"], "stop_sequence": None},
        "usage": _usage(reply.usage),
    }
    events.append(sse(delta, "message_delta"))
    events.append(sse({"type": "message_stop"}, "message_stop"))
    return events


def anthropic_error(status: int, message: str, error_type: str | None = None) -> dict[str, Any]:
    """The Anthropic error body for ``status``."""
    return {
        "type": "error",
        "error": {"type": error_type or anthropic_error_type(status), "message": message},
        "request_id": new_id("req_"),
    }
