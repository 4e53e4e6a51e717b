"""The OpenTelemetry SDK set up from ``OTEL_*`` variables (imported only when the ``otel`` extra is
installed and a variable asks for it; see :func:`harness_run.telemetry.configure_from_env`)."""

from __future__ import annotations

import os
from typing import Any

from opentelemetry import metrics, trace
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import MetricReader, PeriodicExportingMetricReader
from opentelemetry.sdk.resources import SERVICE_NAME, Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter, SimpleSpanProcessor

__all__ = ["install"]


def _json_line(span: ReadableSpan) -> str:
    return span.to_json(indent=None) + "\n"


def install(service_name: str) -> list[Any]:
    """Tracer (and, with an OTLP endpoint, meter) providers for this process; returns them."""
    env = os.environ
    attrs = {} if env.get("OTEL_SERVICE_NAME") else {SERVICE_NAME: service_name}
    resource = Resource.create(attrs)  # also reads OTEL_SERVICE_NAME / OTEL_RESOURCE_ATTRIBUTES
    tracing = TracerProvider(resource=resource)
    endpoint = env.get("OTEL_EXPORTER_OTLP_ENDPOINT") or env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
    names = [n.strip() for n in env.get("OTEL_TRACES_EXPORTER", "otlp" if endpoint else "").split(",")]
    for name in filter(None, names):
        if name == "otlp":
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

            tracing.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
        elif name == "console":
            tracing.add_span_processor(SimpleSpanProcessor(ConsoleSpanExporter()))
    path = env.get("HARNESS_RUN_OTEL_FILE")
    if path:
        out = open(path, "a", encoding="utf-8", buffering=1)  # noqa: SIM115 - open for the process's life
        tracing.add_span_processor(SimpleSpanProcessor(ConsoleSpanExporter(out=out, formatter=_json_line)))
    trace.set_tracer_provider(tracing)
    providers: list[Any] = [tracing]
    if env.get("OTEL_METRICS_EXPORTER", "otlp" if endpoint else "none") == "otlp":
        from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter

        readers: list[MetricReader] = [PeriodicExportingMetricReader(OTLPMetricExporter())]
        meters = MeterProvider(resource=resource, metric_readers=readers)
        metrics.set_meter_provider(meters)
        providers.append(meters)
    return providers
