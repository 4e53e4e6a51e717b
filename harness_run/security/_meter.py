"""Usage and cost read from the wire: what the model endpoint answered each proxied request with.

The model proxy hands every answer's bytes, as they pass, to a :class:`ResponseMeter`; it reads the
usage the endpoint reports — the Anthropic Messages API (``message_start`` + ``message_delta``
events, or the ``message`` object), the OpenAI Responses API (``response.completed``, or the
``response`` object) and Chat Completions (the ``usage`` chunk, or the ``chat.completion`` object)
— and adds it, priced with :mod:`harness_run.vocab.pricing` by the answering model, to the turn's
:class:`WireMeter`. The bytes are never changed. OpenAI counts cached input inside its input total
and reasoning inside its output total: both are split out, as the Codex driver does, so the figures
have the same meaning on every API.

The turn's budget is checked before each request is forwarded: once the metered cost has reached
it, the next request would pass it and is refused (:meth:`WireMeter.exhausted`).
"""

from __future__ import annotations

import contextlib
import json
from typing import Any, cast

from harness_run.events import Usage
from harness_run.vocab.pricing import price

__all__ = ["ResponseMeter", "WireMeter", "usage_of"]

_MAX_BODY = 32 * 1024**2
"""A non-streamed answer larger than this is not metered (none is: answers are kilobytes)."""


def _int(data: dict[str, Any], key: str) -> int:
    value = data.get(key)
    return int(value) if isinstance(value, int | float) and not isinstance(value, bool) else 0


def _dict(value: object) -> dict[str, Any]:
    return cast(dict[str, Any], value) if isinstance(value, dict) else {}


def usage_of(raw: dict[str, Any]) -> Usage:
    """One API's usage object as :class:`~harness_run.events.Usage` (Anthropic's, the Responses
    API's or Chat Completions')."""
    if "prompt_tokens" in raw or "completion_tokens" in raw:  # Chat Completions
        cached = _int(_dict(raw.get("prompt_tokens_details")), "cached_tokens")
        reasoning = _int(_dict(raw.get("completion_tokens_details")), "reasoning_tokens")
        inp, out = _int(raw, "prompt_tokens"), _int(raw, "completion_tokens")
    elif "input_tokens_details" in raw or "output_tokens_details" in raw:  # Responses
        cached = _int(_dict(raw.get("input_tokens_details")), "cached_tokens")
        reasoning = _int(_dict(raw.get("output_tokens_details")), "reasoning_tokens")
        inp, out = _int(raw, "input_tokens"), _int(raw, "output_tokens")
    else:  # Anthropic: cache reads and writes are counted apart from input_tokens already
        return Usage(
            input_tokens=_int(raw, "input_tokens"),
            output_tokens=_int(raw, "output_tokens"),
            cache_read_tokens=_int(raw, "cache_read_input_tokens"),
            cache_write_tokens=_int(raw, "cache_creation_input_tokens"),
        )
    return Usage(
        input_tokens=max(0, inp - cached),
        output_tokens=max(0, out - reasoning),
        cache_read_tokens=cached,
        reasoning_tokens=reasoning,
    )


class WireMeter:
    """One turn's metered usage and cost, and its budget."""

    def __init__(self, budget: float | None = None, model: str = "") -> None:
        self.budget = budget
        self.model = model
        """The model priced when neither request nor answer names one (Vertex AI: in the URL)."""
        self.usage = Usage()
        self.cost_usd: float | None = 0.0
        """USD so far; None once an answering model had no price (the cost is then unknown)."""
        self.responses = 0
        """Answers that reported usage."""
        self.unpriced: set[str] = set()

    def exhausted(self) -> bool:
        """True once the cost has reached the budget: any further request would pass it."""
        return self.budget is not None and self.cost_usd is not None and self.cost_usd >= self.budget

    def response(self, request_body: bytes, content_type: str) -> ResponseMeter:
        """A meter for one answer; ``request_body`` names the model asked for (read only when the
        answer names none: a harness's request is ~100 KB of JSON)."""
        return ResponseMeter(self, request_body, "event-stream" in content_type.lower())

    def requested_model(self, request_body: bytes) -> str:
        """The model a request asked for (else the turn's)."""
        if request_body[:1] == b"{":
            with contextlib.suppress(ValueError):
                return str(_dict(json.loads(request_body)).get("model") or self.model)
        return self.model

    def add(self, model: str, usage: Usage) -> None:
        self.usage += usage
        self.responses += 1
        cost = price(model, usage) if model else None
        if cost is None:
            self.unpriced.add(model or "?")
            self.cost_usd = None
        elif self.cost_usd is not None:
            self.cost_usd = round(self.cost_usd + cost, 8)


class ResponseMeter:
    """Reads one answer's usage as its bytes pass (see the module docstring)."""

    def __init__(self, turn: WireMeter, request_body: bytes, stream: bool) -> None:
        self._turn = turn
        self._request = request_body
        self._model = ""
        """The answering model, once the answer names it."""
        self._stream = stream
        self._buffer = bytearray()
        self._fields: dict[str, Any] = {}
        self._done = False

    def feed(self, chunk: bytes) -> None:
        if not self._stream:
            if len(self._buffer) + len(chunk) <= _MAX_BODY:
                self._buffer += chunk
            return
        self._buffer += chunk
        *lines, rest = self._buffer.split(b"\n")
        self._buffer = bytearray(rest)
        for line in lines:
            if line.startswith(b"data:"):
                self._see(bytes(line[5:]).strip())

    def close(self) -> None:
        """The answer is over (or was cut): add what it reported to the turn, once."""
        if self._done:
            return
        self._done = True
        if self._stream:
            if self._buffer.startswith(b"data:"):
                self._see(bytes(self._buffer[5:]).strip())
        else:
            self._see(bytes(self._buffer))
        if self._fields:
            model = self._model or self._turn.requested_model(self._request)
            self._turn.add(model, usage_of(self._fields))
        self._request = b""

    def _see(self, data: bytes) -> None:
        if not data.startswith(b"{"):
            return  # "[DONE]", keep-alives
        if b"usage" not in data and b"model" not in data and b"\\u" not in data:
            return  # a text or tool-input delta (most of a stream): nothing to read, nothing parsed
        try:
            event = _dict(json.loads(data))
        except ValueError:
            return
        kind = event.get("type")
        holder = event
        if kind == "message_start":
            holder = _dict(event.get("message"))
        elif str(kind).startswith("response.") or event.get("object") == "response":
            holder = _dict(event.get("response")) or event
        usage = _dict(holder.get("usage"))
        model = holder.get("model")
        if isinstance(model, str) and model:
            self._model = model
        if usage:  # Anthropic's message_delta carries the final output count: the latest wins
            self._fields.update({k: v for k, v in usage.items() if v is not None})
