"""Metrics, or nothing: the instruments named here are recorded only when OpenTelemetry is imported
and a meter provider is configured."""

from __future__ import annotations

import sys
from typing import Any

from harness_run.telemetry._spans import SCOPE, AttrValue, clean
from harness_run.vocab.version import __version__

__all__ = ["add", "metrics_enabled", "record"]


def metrics_enabled() -> bool:
    """Whether metrics are recorded: OpenTelemetry imported and a meter provider configured."""
    if sys.modules.get("opentelemetry.metrics") is None:
        return False
    from opentelemetry import metrics as api
    from opentelemetry.metrics import NoOpMeterProvider

    provider = api.get_meter_provider()
    return type(provider).__name__ != "_ProxyMeterProvider" and not isinstance(provider, NoOpMeterProvider)


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
        meter = metrics.get_meter(SCOPE, __version__)
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
        _instrument(name).add(value, attributes=clean(attrs))


def record(name: str, value: float, **attrs: AttrValue | None) -> None:
    """Record a histogram value; no-op without a meter provider."""
    if metrics_enabled():
        _instrument(name).record(value, attributes=clean(attrs))
