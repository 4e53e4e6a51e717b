"""Spans and W3C trace context, or nothing: every call is a no-op unless OpenTelemetry is imported
and a tracer provider is configured."""

from __future__ import annotations

import contextlib
import functools
import sys
from collections.abc import Callable, Generator, Mapping, MutableMapping
from typing import TYPE_CHECKING, Literal

from harness_run.vocab.version import __version__

if TYPE_CHECKING:
    from opentelemetry.trace import Span as OtelSpan
    from opentelemetry.trace import Tracer

__all__ = [
    "NOOP",
    "SCOPE",
    "AttrValue",
    "Span",
    "SpanKind",
    "annotate",
    "clean",
    "enabled",
    "inject",
    "remote_parent",
    "span",
    "start_span",
    "traced",
]

AttrValue = str | int | float | bool
SpanKind = Literal["internal", "server", "client"]
SCOPE = "harness_run"
"""The instrumentation scope, and the prefix of every attribute key."""


def enabled() -> bool:
    """Whether spans are recorded: OpenTelemetry imported and a tracer provider configured."""
    trace = sys.modules.get("opentelemetry.trace")
    if trace is None:
        return False
    from opentelemetry import trace as api

    provider = api.get_tracer_provider()
    return not isinstance(provider, api.ProxyTracerProvider | api.NoOpTracerProvider)


_TRACERS: dict[int, Tracer] = {}


def _tracer() -> Tracer:
    """The library's tracer of the current provider (made once per provider: ``get_tracer`` is
    ~40 % of a span's cost in the SDK)."""
    from opentelemetry import trace

    provider = trace.get_tracer_provider()
    tracer = _TRACERS.get(id(provider))
    if tracer is None:
        tracer = _TRACERS[id(provider)] = provider.get_tracer(SCOPE, __version__)
    return tracer


def clean(attrs: Mapping[str, AttrValue | None]) -> dict[str, AttrValue]:
    """``attrs`` as attributes: None values left out, keys prefixed with ``harness_run.``."""
    return {f"{SCOPE}.{key}": value for key, value in attrs.items() if value is not None}


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
            self._span.set_attributes(clean(attrs))

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
        name, context=context, kind=otel_kind, start_time=start_ns, attributes=clean(attrs)
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

        trace.get_current_span().set_attributes(clean(attrs))


def inject[H: MutableMapping[str, str]](headers: H) -> H:
    """Add the current trace context (W3C ``traceparent``/``tracestate``) to ``headers``."""
    if enabled():
        from opentelemetry import propagate

        propagate.inject(headers)
    return headers


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
