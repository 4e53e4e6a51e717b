"""The one SSE client (aiohttp, imported when a stream is opened) of the worker's and the team
server's event streams, with one reconnect policy:

- the stream is read until the caller stops (it has its last event, e.g. the turn's ``result``);
- a dropped connection, a read timeout (the servers send a keep-alive comment at least every
  10 s; :data:`READ_TIMEOUT` is 60 s) or an end of the stream before that re-connects after
  :data:`RETRY_PAUSE` s with ``Last-Event-ID``: the id of the last event received, verbatim;
- re-connecting gives up with :class:`~harness_run.errors.InfrastructureError` (retryable) when
  ``reconnect_for`` seconds (default :data:`RECONNECT_FOR`) passed since the first failure without
  anything received in between (an event or a keep-alive): a server that accepts and at once ends
  the stream cannot keep a client waiting for ever;
- an answer other than 200 is raised at once, as the caller's ``refused(status, text)``.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from harness_run import telemetry
from harness_run.errors import InfrastructureError

if TYPE_CHECKING:
    import aiohttp

__all__ = ["READ_TIMEOUT", "RECONNECT_FOR", "RETRY_PAUSE", "SseEvent", "follow_events"]

RECONNECT_FOR = 10.0
"""Seconds a lost stream is re-connected for (since the first failure) before giving up."""
RETRY_PAUSE = 0.2
"""Seconds between re-connect attempts."""
READ_TIMEOUT = 60.0
"""Seconds of silence (no event, no keep-alive) after which a connection counts as lost."""


@dataclass(frozen=True, slots=True)
class SseEvent:
    """One server-sent event: its ``event`` name (``message`` when the frame names none), its
    ``data`` (lines joined with newlines) and its ``id`` (None when it has none)."""

    event: str
    data: str
    id: str | None


async def follow_events(
    url: str,
    *,
    refused: Callable[[int, str], Exception],
    lost: str,
    headers: Mapping[str, str] | None = None,
    last_id: str | None = None,
    session: Callable[[], aiohttp.ClientSession] | None = None,
    reconnect_for: float = RECONNECT_FOR,
) -> AsyncGenerator[SseEvent]:
    """The events of the SSE stream at ``url`` after ``last_id``, live, re-connecting as the module
    says. ``headers`` go with every request (plus the trace context); ``session``: the client
    session to use (default: a fresh one per connection); ``lost`` names the stream in the error
    after giving up (``"the event stream of turn t1 from the worker at http://…"``)."""
    import aiohttp

    timeout = aiohttp.ClientTimeout(total=None, sock_connect=5, sock_read=READ_TIMEOUT)
    deadline: float | None = None
    problem = "the stream ended"
    while True:
        sent = {**(headers or {}), "Accept": "text/event-stream"}
        if last_id is not None:
            sent["Last-Event-ID"] = last_id
        try:
            async with _get(session, url, telemetry.inject(sent), timeout) as answer:
                if answer.status != 200:
                    raise refused(answer.status, await answer.text())
                async for event in _parse(answer.content):
                    deadline = None  # something came: the window starts again at the next failure
                    if event is None:
                        continue
                    if event.id is not None:
                        last_id = event.id
                    yield event
            problem = "the stream ended"
        except (aiohttp.ClientError, TimeoutError) as exc:
            problem = f"{type(exc).__name__}: {exc}"
        now = time.monotonic()
        if deadline is None:
            deadline = now + reconnect_for
        elif now >= deadline:
            raise InfrastructureError(
                f"lost {lost} and could not re-connect for {reconnect_for:g} s ({problem}); the turn's "
                "history so far is in the store",
                retryable=True,
            )
        await asyncio.sleep(RETRY_PAUSE)


@contextlib.asynccontextmanager
async def _get(
    session: Callable[[], aiohttp.ClientSession] | None,
    url: str,
    headers: Mapping[str, str],
    timeout: aiohttp.ClientTimeout,
) -> AsyncGenerator[aiohttp.ClientResponse]:
    import aiohttp

    if session is not None:
        async with session().get(url, headers=headers, timeout=timeout) as answer:
            yield answer
        return
    async with aiohttp.ClientSession() as own, own.get(url, headers=headers, timeout=timeout) as answer:
        yield answer


async def _parse(stream: aiohttp.StreamReader) -> AsyncIterator[SseEvent | None]:
    """The events of a response body, and None for each comment (a keep-alive); no line-length
    limit (an event's JSON may be large)."""
    buffer = b""
    event, data, seq = "message", list[str](), None
    async for chunk in stream.iter_any():
        buffer += chunk
        *lines, buffer = buffer.split(b"\n")
        for raw in lines:
            line = raw.decode("utf-8", errors="replace").rstrip("\r")
            if not line:
                if data:
                    yield SseEvent(event, "\n".join(data), seq)
                event, data, seq = "message", [], None
            elif line.startswith(":"):
                yield None
            else:
                name, _, value = line.partition(":")
                value = value.removeprefix(" ")
                if name == "event":
                    event = value
                elif name == "data":
                    data.append(value)
                elif name == "id":
                    seq = value
