"""The HTTP kit of the team server (``harness_run.server``) and the in-image worker
(``harness_run.worker``), and the SSE client of their clients (``runtime.server_client``,
``runtime.worker_client``).

- Errors: one body (:class:`ErrorBody`) and one status table (:func:`error_middleware`) — a body that
  cannot be used or a spec error 422 ``invalid``, 403 ``forbidden``, 404 ``not_found``, 405
  ``method_not_allowed``, 409 ``session_busy``, 413 ``too_large``, other usage errors 400
  ``bad_request``, anything else 500 ``internal`` — with the request's secret values redacted.
- Bodies: :func:`read_body` (UTF-8 JSON objects up to :data:`MAX_BODY`, validated by a model).
- :func:`trace_middleware`: a server span per request, continuing the caller's trace.
- SSE: one id scheme (:func:`event_id`: ``<turn>:<seq>``), one writer (:func:`stream_events`), one
  client with one reconnect policy (:func:`follow_events`).
- The serve loop: :func:`new_app`, :func:`listening` (the bound port, SIGTERM/SIGINT).

aiohttp is imported where it is used, never by importing this package.
"""

from harness_run.web._body import MAX_BODY, BodyError, read_body
from harness_run.web._errors import (
    ErrorBody,
    Handler,
    Middleware,
    error,
    error_middleware,
    json_response,
    read_error,
)
from harness_run.web._serve import SHUTDOWN_TIMEOUT, Listening, bound_port, listening, new_app
from harness_run.web._sse import KEEPALIVE, SseFrame, event_id, parse_event_id, sse_frame, stream_events
from harness_run.web._sse_client import READ_TIMEOUT, RECONNECT_FOR, SseEvent, follow_events
from harness_run.web._trace import route_of, trace_middleware

__all__ = [
    "KEEPALIVE",
    "MAX_BODY",
    "READ_TIMEOUT",
    "RECONNECT_FOR",
    "SHUTDOWN_TIMEOUT",
    "BodyError",
    "ErrorBody",
    "Handler",
    "Listening",
    "Middleware",
    "SseEvent",
    "SseFrame",
    "bound_port",
    "error",
    "error_middleware",
    "event_id",
    "follow_events",
    "json_response",
    "listening",
    "new_app",
    "parse_event_id",
    "read_body",
    "read_error",
    "route_of",
    "sse_frame",
    "stream_events",
    "trace_middleware",
]
