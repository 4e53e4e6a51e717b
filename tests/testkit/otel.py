"""OpenTelemetry for tests: the SDK's in-memory span exporter and metric reader, installed once per
test process as the global providers (OpenTelemetry allows setting them only once)."""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import TracebackType
from typing import Any

from opentelemetry import metrics, trace
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

__all__ = ["InMemoryTelemetry", "OtlpReceiver", "in_memory", "read_span_lines", "span_dict"]


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


class OtlpReceiver:
    """A minimal OTLP/HTTP (protobuf) collector on 127.0.0.1: ``with OtlpReceiver() as otlp:`` ->
    ``otlp.endpoint`` for ``OTEL_EXPORTER_OTLP_ENDPOINT``; ``otlp.spans`` as flat dicts (``name``,
    ``trace_id``, ``span_id``, ``parent_id`` in hex, ``attributes``, ``service``)."""

    def __init__(self) -> None:
        self.spans: list[dict[str, Any]] = []
        self.metrics: dict[str, list[dict[str, Any]]] = {}
        """Metric name -> its number data points (``value``, ``attributes``) as exported."""
        self._lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                if self.path == "/v1/traces":
                    receiver.take(body)
                elif self.path == "/v1/metrics":
                    receiver.take_metrics(body)
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.endpoint = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def take(self, body: bytes) -> None:
        from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

        request = ExportTraceServiceRequest.FromString(body)
        found: list[dict[str, Any]] = []
        for resource in request.resource_spans:
            service = next(
                (a.value.string_value for a in resource.resource.attributes if a.key == "service.name"), ""
            )
            for scope in resource.scope_spans:
                for span in scope.spans:
                    attributes: dict[str, Any] = {}
                    for attr in span.attributes:
                        kind = attr.value.WhichOneof("value")
                        attributes[attr.key] = getattr(attr.value, kind) if kind else None
                    found.append(
                        {
                            "name": span.name,
                            "trace_id": span.trace_id.hex(),
                            "span_id": span.span_id.hex(),
                            "parent_id": span.parent_span_id.hex() or None,
                            "attributes": attributes,
                            "service": service,
                        }
                    )
        with self._lock:
            self.spans.extend(found)

    def take_metrics(self, body: bytes) -> None:
        from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import ExportMetricsServiceRequest

        request: Any = ExportMetricsServiceRequest.FromString(body)  # protobuf messages are untyped
        for resource in request.resource_metrics:
            for scope in resource.scope_metrics:
                for metric in scope.metrics:
                    kind: str | None = metric.WhichOneof("data")
                    data: Any = getattr(metric, kind) if kind else None
                    points: list[dict[str, Any]] = []
                    found: list[Any] = list(data.data_points) if data is not None else []
                    for point in found:
                        attributes = {a.key: a.value.string_value for a in point.attributes}
                        value = point.count if kind == "histogram" else (point.as_int or point.as_double)
                        points.append({"value": value, "attributes": attributes})
                    with self._lock:
                        self.metrics.setdefault(str(metric.name), []).extend(points)

    def __enter__(self) -> OtlpReceiver:
        self._thread.start()
        return self

    def __exit__(self, *exc: object | TracebackType) -> None:
        self._server.shutdown()
        self._server.server_close()
