"""Server-sent events of :data:`~harness_run.events.AgentEvent`: one id scheme (``<turn>:<seq>``) and
one writer for the team server and the worker.

A frame is ``id: <turn>:<seq>``, ``event: <type>``, ``data: <the event's JSON>``; a text delta has no
id (deltas are live only: they move no resume point); a comment (``: keepalive``) keeps proxies
open when nothing happens. A client resumes with ``Last-Event-ID`` (or ``?after=``): the id of the
last event it has."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncGenerator, AsyncIterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from aiohttp import web

    from harness_run.events import AgentEvent

__all__ = ["KEEPALIVE", "SseFrame", "event_id", "parse_event_id", "sse_frame", "stream_events"]

KEEPALIVE = b": keepalive\n\n"


def event_id(turn: int, seq: int) -> str:
    """The SSE id of an event: ``<turn>:<seq>``, ordered by (turn, seq) within a session."""
    return f"{turn}:{seq}"


def parse_event_id(raw: str | None) -> tuple[int, int]:
    """The (turn, seq) cursor of an SSE id (``"-1"``, ``""`` or None: before everything; a bare
    ``"<turn>"``: after that whole turn). Raises ValueError for anything else."""
    text = (raw or "").strip()
    if text in ("", "-1"):
        return (0, -1)
    turn, sep, seq = text.partition(":")
    if not sep:
        return (int(turn), 1 << 62)
    return (int(turn), int(seq))


@dataclass(frozen=True, slots=True)
class SseFrame:
    """A frame that is not an AgentEvent (the worker's ``worker-error``): no id."""

    event: str
    data: str


def sse_frame(item: AgentEvent | SseFrame) -> bytes:
    """One frame's bytes."""
    if isinstance(item, SseFrame):
        return f"event: {item.event}\ndata: {item.data}\n\n".encode()
    head = f"event: {item.type}\n"
    if item.type != "delta":
        head = f"id: {event_id(item.turn, item.seq)}\n{head}"
    return f"{head}data: {item.model_dump_json()}\n\n".encode()


async def stream_events(
    request: web.Request, events: AsyncIterator[AgentEvent | SseFrame | None]
) -> web.StreamResponse:
    """Answer ``request`` with ``events`` as SSE (None: a keep-alive comment) until they end. A client
    that goes away ends it quietly (it resumes with ``Last-Event-ID``); ``events`` is closed either
    way."""
    from aiohttp import web

    response = web.StreamResponse(
        headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
    )
    await response.prepare(request)
    try:
        async for item in events:
            await response.write(KEEPALIVE if item is None else sse_frame(item))
        with contextlib.suppress(ConnectionResetError):
            await response.write_eof()
    except ConnectionResetError:
        pass
    finally:
        if isinstance(events, AsyncGenerator):
            with contextlib.suppress(Exception):
                await events.aclose()
    return response
