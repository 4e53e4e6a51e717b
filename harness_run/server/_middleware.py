"""The server's middleware: a trace span per request and errors as JSON (the HTTP kit's,
:mod:`harness_run.web`), an access line per request (key id, never the key), and the API-key check
(with the cool-down after repeated failures)."""

from __future__ import annotations

import asyncio
import logging
import time

from aiohttp import web

from harness_run.server._access import CALLER
from harness_run.server._dashboard import DASHBOARD_PATHS
from harness_run.server._keys import check_key
from harness_run.server._limits import auth_failures
from harness_run.server._request import KEYS, SECRET
from harness_run.web import Handler, error, error_middleware, route_of, trace_middleware

__all__ = ["access", "authenticate", "guard_errors", "trace"]

_OPEN = frozenset({"/healthz", "/openapi.json", *DASHBOARD_PATHS})  # the dashboard's files hold no data
access_log = logging.getLogger("harness_run.server.access")


trace = trace_middleware("harness_run.server", errors_metric="harness_run.server.errors")
"""A server span per request, continuing the client's trace (W3C ``traceparent``); 5xx count as
errors in the metrics. Nothing at all when telemetry is off."""

guard_errors = error_middleware("server", "/openapi.json")
"""Every failure of a request as an ``ErrorBody`` with its status, secret values redacted."""


@web.middleware
async def access(request: web.Request, handler: Handler) -> web.StreamResponse:
    """One access line per request: key id (never the key), method, route, session, status, ms."""
    started = time.monotonic()
    status = 500
    try:
        response = await handler(request)
        status = response.status
        return response
    except web.HTTPException as exc:
        status = exc.status
        raise
    finally:
        if request.path not in DASHBOARD_PATHS:
            record = request.get(CALLER)
            access_log.info(
                "key=%s %s %s session=%s status=%d ms=%.1f",
                record.key_id if record is not None else "-",
                request.method,
                route_of(request),
                request.match_info.get("session_id", "-"),
                status,
                (time.monotonic() - started) * 1000,
            )


@web.middleware
async def authenticate(request: web.Request, handler: Handler) -> web.StreamResponse:
    if request.path in _OPEN:
        return await handler(request)
    header = request.headers.get("Authorization")
    app = request.app
    failures = auth_failures(app)  # repeated 401s from one address: 429 for a cool-down
    record = await asyncio.to_thread(check_key, app[KEYS], header, app[SECRET])
    if record is None:
        # a good key still works from a cooling-down address (a shared NAT, Cloud Run's front
        # end): the key check itself is cheap (unknown ids are refused from the cached id set)
        if failures.blocked(request.remote):
            return failures.response()
        failures.failed(request.remote)
        return error(
            401,
            "unauthorized",
            "missing, wrong or revoked API key: send 'Authorization: Bearer <key>' with a key from "
            "`harness-run serve keys create`",
        )
    request[CALLER] = record
    return await handler(request)
