"""OpenTelemetry when it is there, nothing when it is not: spans, W3C trace context, metrics.

Every call here is a no-op (no import, no allocation beyond a dict lookup) unless the
``opentelemetry`` package has been imported *and* a tracer (or meter) provider was configured —
by :func:`configure_from_env` (``harness-run serve``/``run``, the worker), by the application, or
by ``opentelemetry-instrument``. So the library never imports OpenTelemetry itself on the hot path
and users without the ``otel`` extra pay nothing.

Attributes carry names, ids, numbers and enumerated values only — never a prompt, a tool's input
or output, an environment variable or a secret (the canary tests check it).
"""

from __future__ import annotations

import contextlib
import functools
import os
import sys
from collections.abc import Awaitable, Callable, Generator, Mapping, MutableMapping
from typing import TYPE_CHECKING, Any, Literal, Protocol

from harness_run.vocab.version import __version__

if TYPE_CHECKING:
    from opentelemetry.trace import Span as OtelSpan
    from opentelemetry.trace import Tracer

__all__ = [
    "NOOP",
    "AttrValue",
    "Span",
    "add",
    "annotate",
    "configure_from_env",
    "enabled",
    "inject",
    "metrics_enabled",
    "record",
    "remote_parent",
    "route_span",
    "shutdown",
    "span",
    "start_span",
    "traced",
]

AttrValue = str | int | float | bool
SpanKind = Literal["internal", "server", "client"]
_SCOPE = "harness_run"


def enabled() -> bool:
    """Whether spans are recorded: OpenTelemetry imported and a tracer provider configured."""
    trace = sys.modules.get("opentelemetry.trace")
    if trace is None:
        return False
    from opentelemetry import trace as api

    provider = api.get_tracer_provider()
    return not isinstance(provider, api.ProxyTracerProvider | api.NoOpTracerProvider)


def metrics_enabled() -> bool:
    """Whether metrics are recorded: OpenTelemetry imported and a meter provider configured."""
    if sys.modules.get("opentelemetry.metrics") is None:
        return False
    from opentelemetry import metrics as api
    from opentelemetry.metrics import NoOpMeterProvider

    provider = api.get_meter_provider()
    return type(provider).__name__ != "_ProxyMeterProvider" and not isinstance(provider, NoOpMeterProvider)


_TRACERS: dict[int, Tracer] = {}


def _tracer() -> Tracer:
    """The library's tracer of the current provider (made once per provider: ``get_tracer`` is
    ~40 % of a span's cost in the SDK)."""
    from opentelemetry import trace

    provider = trace.get_tracer_provider()
    tracer = _TRACERS.get(id(provider))
    if tracer is None:
        tracer = _TRACERS[id(provider)] = provider.get_tracer(_SCOPE, __version__)
    return tracer


def _clean(attrs: Mapping[str, AttrValue | None]) -> dict[str, AttrValue]:
    return {key: value for key, value in attrs.items() if value is not None}


class Span:
    """A started span, or nothing (:data:`NOOP`) when telemetry is off. Cheap either way."""

    __slots__ = ("_span",)

    def __init__(self, span: OtelSpan | None) -> None:
        self._span = span

    @property
    def recording(self) -> bool:
        return self._span is not None

    @property
    def trace_id(self) -> str | None:
        """The span's trace id as 32 hex digits (None when off)."""
        if self._span is None:
            return None
        return format(self._span.get_span_context().trace_id, "032x")

    def set(self, **attrs: AttrValue | None) -> None:
        """Set attributes (None values are left out); keys become ``harness_run.<key>``."""
        if self._span is not None:
            self._span.set_attributes({f"{_SCOPE}.{k}": v for k, v in _clean(attrs).items()})

    def fail(self, message: str) -> None:
        """Mark the span as an error with ``message`` (already redacted by the caller)."""
        if self._span is not None:
            from opentelemetry.trace import Status, StatusCode

            self._span.set_status(Status(StatusCode.ERROR, message))

    def end(self, end_ns: int | None = None) -> None:
        if self._span is not None:
            self._span.end(end_time=end_ns)

    @contextlib.contextmanager
    def current(self) -> Generator[None]:
        """Make this span the current one (children nest under it; its context is propagated)."""
        if self._span is None:
            yield
            return
        from opentelemetry import trace

        with trace.use_span(self._span, end_on_exit=False, record_exception=False):
            yield


NOOP = Span(None)


def start_span(
    name: str,
    *,
    parent: Span | None = None,
    start_ns: int | None = None,
    kind: SpanKind = "internal",
    **attrs: AttrValue | None,
) -> Span:
    """Start a span (a child of ``parent``, else of the current span); end it with ``.end()``."""
    if not enabled():
        return NOOP
    return _start(name, parent, start_ns, kind, attrs)


def _start(
    name: str,
    parent: Span | None,
    start_ns: int | None,
    kind: SpanKind,
    attrs: Mapping[str, AttrValue | None],
) -> Span:
    from opentelemetry import trace

    context = trace.set_span_in_context(parent._span) if parent is not None and parent._span else None  # pyright: ignore[reportPrivateUsage]
    kinds = {"server": trace.SpanKind.SERVER, "client": trace.SpanKind.CLIENT}
    otel_kind = kinds.get(kind, trace.SpanKind.INTERNAL)
    started = _tracer().start_span(
        name,
        context=context,
        kind=otel_kind,
        start_time=start_ns,
        attributes={f"{_SCOPE}.{k}": v for k, v in _clean(attrs).items()},
    )
    return Span(started)


@contextlib.contextmanager
def span(name: str, *, kind: SpanKind = "internal", **attrs: AttrValue | None) -> Generator[Span]:
    """A span around a block, current inside it; an exception marks it failed (type name only)."""
    if not enabled():
        yield NOOP
        return
    handle = _start(name, None, None, kind, attrs)
    try:
        with handle.current():
            yield handle
    except BaseException as exc:
        handle.fail(type(exc).__name__)
        raise
    finally:
        handle.end()


def traced[**P, R](name: str) -> Callable[[Callable[P, R]], Callable[P, R]]:
    """Decorate a (synchronous) function: each call is a span named ``name``, current inside it."""

    def wrap(func: Callable[P, R]) -> Callable[P, R]:
        @functools.wraps(func)
        def call(*args: P.args, **kwargs: P.kwargs) -> R:
            if not enabled():
                return func(*args, **kwargs)
            with span(name):
                return func(*args, **kwargs)

        return call

    return wrap


def annotate(**attrs: AttrValue | None) -> None:
    """Set attributes on the current span (e.g. one a :func:`traced` function runs in)."""
    if enabled():
        from opentelemetry import trace

        trace.get_current_span().set_attributes({f"{_SCOPE}.{k}": v for k, v in _clean(attrs).items()})


def inject[H: MutableMapping[str, str]](headers: H) -> H:
    """Add the current trace context (W3C ``traceparent``/``tracestate``) to ``headers``."""
    if enabled():
        from opentelemetry import propagate

        propagate.inject(headers)
    return headers


def route_span(method: str, route: str, headers: Mapping[str, str], service: str) -> Span:
    """A server span for one request, continuing the caller's trace (``traceparent``); end it."""
    if not enabled():
        return NOOP
    with remote_parent(headers):
        return _start(f"{service} {method} {route}", None, None, "server", {"route": route, "method": method})


class _Answer(Protocol):
    @property
    def status(self) -> int: ...


async def serve_request[R: _Answer](
    method: str,
    route: str,
    headers: Mapping[str, str],
    service: str,
    handle: Callable[[], Awaitable[R]],
    *,
    errors_metric: str | None = None,
) -> R:
    """Answer one request of an HTTP server (``handle()``) inside a server span that continues the
    caller's trace; a 5xx answer fails the span and counts in ``errors_metric``. Nothing at all when
    telemetry is off (the server's and the worker's middleware)."""
    if not (enabled() or (errors_metric is not None and metrics_enabled())):
        return await handle()
    span = route_span(method, route, headers, service)
    try:
        with span.current():
            answer = await handle()
        span.set(status=answer.status)
        if answer.status >= 500:
            span.fail(f"HTTP {answer.status}")
            if errors_metric is not None:
                add(errors_metric, route=route, status=answer.status)
        return answer
    finally:
        span.end()


@contextlib.contextmanager
def remote_parent(headers: Mapping[str, str]) -> Generator[None]:
    """Continue the caller's trace (its ``traceparent`` header) inside the block."""
    if not enabled() or "traceparent" not in {key.lower() for key in headers}:
        yield
        return
    from opentelemetry import context, propagate

    carrier = {key.lower(): value for key, value in headers.items()}
    token = context.attach(propagate.extract(carrier))
    try:
        yield
    finally:
        context.detach(token)


# --- metrics --------------------------------------------------------------------------------------

_INSTRUMENTS: dict[tuple[int, str], Any] = {}
_KINDS = {
    "harness_run.server.turns": ("counter", "{turn}", "turns run through the server"),
    "harness_run.server.errors": ("counter", "{error}", "failed turns and 5xx answers of the server"),
    "harness_run.server.turn.duration": ("histogram", "s", "wall time of a turn through the server"),
    "harness_run.server.active_sessions": ("updown", "{session}", "sessions with a turn running"),
    "harness_run.server.engines": ("updown", "{engine}", "engines served"),
}


def _instrument(name: str) -> Any:
    from opentelemetry import metrics

    provider = metrics.get_meter_provider()
    key = (id(provider), name)
    found = _INSTRUMENTS.get(key)
    if found is None:
        kind, unit, description = _KINDS[name]
        meter = metrics.get_meter(_SCOPE, __version__)
        make = {
            "counter": meter.create_counter,
            "histogram": meter.create_histogram,
            "updown": meter.create_up_down_counter,
        }[kind]
        found = _INSTRUMENTS[key] = make(name, unit=unit, description=description)
    return found


def add(name: str, value: int = 1, **attrs: AttrValue | None) -> None:
    """Add to a counter (or up-down counter) named in this module; no-op without a meter provider."""
    if metrics_enabled():
        _instrument(name).add(value, attributes={f"{_SCOPE}.{k}": v for k, v in _clean(attrs).items()})


def record(name: str, value: float, **attrs: AttrValue | None) -> None:
    """Record a histogram value; no-op without a meter provider."""
    if metrics_enabled():
        _instrument(name).record(value, attributes={f"{_SCOPE}.{k}": v for k, v in _clean(attrs).items()})


# --- set-up from the environment ------------------------------------------------------------------

_CONFIGURED: list[Any] = []


def _wanted() -> bool:
    env = os.environ
    if env.get("OTEL_SDK_DISABLED", "").lower() == "true":
        return False
    return any(
        env.get(name)
        for name in (
            "OTEL_EXPORTER_OTLP_ENDPOINT",
            "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
            "OTEL_TRACES_EXPORTER",
            "HARNESS_RUN_OTEL_FILE",
        )
    )


def configure_from_env(service_name: str) -> bool:
    """Set up the OpenTelemetry SDK from the standard ``OTEL_*`` variables, once per process.

    Does something only when the ``otel`` extra is installed, no provider is set yet, and
    ``OTEL_EXPORTER_OTLP_ENDPOINT`` (or ``OTEL_TRACES_EXPORTER``, or ``HARNESS_RUN_OTEL_FILE``) is
    set. Exporters: ``otlp`` (HTTP/protobuf; endpoint, headers and timeouts from ``OTEL_EXPORTER_OTLP_*``),
    ``console``, ``none``; ``HARNESS_RUN_OTEL_FILE=PATH`` adds one JSON span per line to PATH.
    Metrics go to OTLP when ``OTEL_METRICS_EXPORTER`` is ``otlp`` or an OTLP endpoint is set.
    ``OTEL_SERVICE_NAME`` overrides ``service_name``. Returns whether tracing is on afterwards."""
    if _CONFIGURED or not _wanted():
        return enabled()
    try:
        from harness_run.vocab._otel_setup import install
    except ImportError:  # the extra is not installed
        return False
    if enabled():  # the application configured its own provider: leave it alone
        return True
    _CONFIGURED.append(install(service_name))
    return enabled()


def shutdown() -> None:
    """Flush and stop what :func:`configure_from_env` set up (before ``os._exit``)."""
    for providers in _CONFIGURED:
        for provider in providers:
            with contextlib.suppress(Exception):
                provider.shutdown()
    _CONFIGURED.clear()
