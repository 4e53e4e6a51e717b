"""Small helpers shared by the wire renderers: SSE framing, chunking, ids and error types."""

from __future__ import annotations

import json
import uuid
from typing import Any

__all__ = ["anthropic_error_type", "chunks", "new_id", "openai_error_type", "sse"]

_CHUNK = 48


def sse(data: Any, event: str | None = None) -> bytes:
    """One server-sent event: optional ``event:`` line, a JSON (or literal string) ``data:`` line."""
    payload = data if isinstance(data, str) else json.dumps(data, separators=(",", ":"))
    head = f"event: {event}\n" if event else ""
    return f"{head}data: {payload}\n\n".encode()


def chunks(text: str, size: int = _CHUNK) -> list[str]:
    """``text`` split into deltas of at most ``size`` characters (one empty delta for empty text)."""
    return [text[i : i + size] for i in range(0, len(text), size)] or [""]


def new_id(prefix: str) -> str:
    """A fresh id like ``msg_0123abcd…`` in the vendor's style."""
    return f"{prefix}{uuid.uuid4().hex[:24]}"


_ANTHROPIC_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    529: "overloaded_error",
}


def anthropic_error_type(status: int) -> str:
    """The Anthropic error ``type`` for an HTTP status."""
    return _ANTHROPIC_TYPES.get(status, "api_error" if status >= 500 else "invalid_request_error")


def openai_error_type(status: int) -> str:
    """The OpenAI error ``type`` for an HTTP status."""
    if status == 401:
        return "authentication_error"
    if status == 429:
        return "rate_limit_exceeded"
    return "server_error" if status >= 500 else "invalid_request_error"
