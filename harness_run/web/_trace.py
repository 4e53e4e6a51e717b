"""A server span per request (OpenTelemetry through :mod:`harness_run.telemetry`; nothing at all when
it is off), continuing the caller's trace (W3C ``traceparent``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from harness_run import telemetry

if TYPE_CHECKING:
    from aiohttp import web

    from harness_run.web._errors import Handler, Middleware

__all__ = ["route_of", "trace_middleware"]


def route_of(request: web.Request) -> str:
    """The request's route as declared (``/v1/sessions/{session_id}``), or ``unmatched``: never the
    path itself, whose ids would make every span and metric name unique."""
    resource = request.match_info.route.resource
    return resource.canonical if resource is not None else "unmatched"


def trace_middleware(service: str, *, errors_metric: str | None = None) -> Middleware:
    """The middleware that answers each request inside a server span named ``<service> <method>
    <route>``, continuing the caller's trace; handlers run in its context (a turn started by the
    request is its child). A 5xx answer fails the span and counts in ``errors_metric``."""
    from aiohttp import web

    @web.middleware
    async def traced(request: web.Request, handler: Handler) -> web.StreamResponse:
        if not (telemetry.enabled() or (errors_metric is not None and telemetry.metrics_enabled())):
            return await handler(request)
        route = route_of(request)
        with telemetry.remote_parent(request.headers):
            span = telemetry.start_span(
                f"{service} {request.method} {route}", kind="server", route=route, method=request.method
            )
        try:
            with span.current():
                answer = await handler(request)
            span.set(status=answer.status)
            if answer.status >= 500:
                span.fail(f"HTTP {answer.status}")
                if errors_metric is not None:
                    telemetry.add(errors_metric, route=route, status=answer.status)
            return answer
        finally:
            span.end()

    return traced
