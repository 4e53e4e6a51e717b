"""OpenTelemetry when it is there, nothing when it is not: spans, W3C trace context, metrics.

Every call here is a no-op (no import, no allocation beyond a dict lookup) unless the
``opentelemetry`` package has been imported *and* a tracer (or meter) provider was configured —
by :func:`configure_from_env` (``harness-run serve``/``run``, the worker), by the application, or
by ``opentelemetry-instrument``. So the library never imports OpenTelemetry itself on the hot path
and users without the ``otel`` extra pay nothing.

Attributes carry names, ids, numbers and enumerated values only — never a prompt, a tool's input
or output, an environment variable or a secret (the canary tests check it).

The HTTP servers' span per request is the HTTP kit's (:mod:`harness_run.web`), over this facade.
"""

from harness_run.telemetry._metrics import add, metrics_enabled, record
from harness_run.telemetry._setup import configure_from_env, shutdown
from harness_run.telemetry._spans import (
    NOOP,
    AttrValue,
    Span,
    SpanKind,
    annotate,
    enabled,
    inject,
    remote_parent,
    span,
    start_span,
    traced,
)

__all__ = [
    "NOOP",
    "AttrValue",
    "Span",
    "SpanKind",
    "add",
    "annotate",
    "configure_from_env",
    "enabled",
    "inject",
    "metrics_enabled",
    "record",
    "remote_parent",
    "shutdown",
    "span",
    "start_span",
    "traced",
]
