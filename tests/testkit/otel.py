"""OpenTelemetry for tests: the SDK's in-memory span exporter and metric reader, installed once per
test process as the global providers (OpenTelemetry allows setting them only once)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from opentelemetry import metrics, trace
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

__all__ = ["InMemoryTelemetry", "in_memory", "read_span_lines", "span_dict"]


@dataclass
class InMemoryTelemetry:
    exporter: InMemorySpanExporter
    reader: InMemoryMetricReader

    def spans(self) -> list[dict[str, Any]]:
        """The finished spans so far, as the JSON dicts the SDK writes (same shape as a file export)."""
        return [span_dict(span) for span in self.exporter.get_finished_spans()]

    def metric_points(self, name: str) -> list[Any]:
        """The data points of metric ``name`` (cumulative since the process started)."""
        data = self.reader.get_metrics_data()
        points: list[Any] = []
        resources: list[Any] = list(data.resource_metrics) if data is not None else []  # pyright: ignore[reportUnknownMemberType, reportUnknownArgumentType]
        for resource in resources:
            for scope in resource.scope_metrics:
                for metric in scope.metrics:
                    if metric.name == name:
                        points.extend(metric.data.data_points)
        return points


_INSTALLED: list[InMemoryTelemetry] = []


def in_memory() -> InMemoryTelemetry:
    """The process's in-memory telemetry (installed on first use), with no spans recorded yet."""
    if not _INSTALLED:
        exporter = InMemorySpanExporter()
        tracing = TracerProvider()
        tracing.add_span_processor(SimpleSpanProcessor(exporter))
        trace.set_tracer_provider(tracing)
        reader = InMemoryMetricReader()
        metrics.set_meter_provider(MeterProvider(metric_readers=[reader]))
        _INSTALLED.append(InMemoryTelemetry(exporter, reader))
    telemetry = _INSTALLED[0]
    telemetry.exporter.clear()
    return telemetry


def span_dict(span: ReadableSpan) -> dict[str, Any]:
    return json.loads(span.to_json(indent=None))


def read_span_lines(path: Path) -> list[dict[str, Any]]:
    """Spans a process wrote with ``HARNESS_RUN_OTEL_FILE`` (one JSON object per line)."""
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
