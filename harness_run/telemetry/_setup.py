"""Setting the SDK up from the environment, once per process, and flushing it at the end."""

from __future__ import annotations

import contextlib
import os
from typing import Any

from harness_run.telemetry._spans import enabled

__all__ = ["configure_from_env", "shutdown"]

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
        from harness_run.telemetry._sdk import install
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
