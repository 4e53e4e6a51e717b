"""Spans of a turn (OpenTelemetry, through :mod:`harness_run.telemetry`; no-ops when off).

``harness_run.turn`` wraps a turn in every runtime (the client's, the server's, the worker's);
where the harness runs (the local engine, also inside the worker) it has children: the workspace
set-up, the harness process, one span per tool call (from the ``tool_use`` event to its
``tool_result``) and the store writes. Attributes are ids, names and numbers only.
"""

from __future__ import annotations

from harness_run import telemetry
from harness_run.events import AgentEvent, RunResult, ToolResultEvent, ToolUseEvent
from harness_run.telemetry import Span

__all__ = ["ToolSpans", "end_turn_span", "start_turn_span"]


def start_turn_span(engine: str, session_id: str, turn: int, harness: str, model: str | None) -> Span:
    """The turn's span (a child of the current span, e.g. the server request it came in with)."""
    return telemetry.start_span(
        "harness_run.turn", engine=engine, session=session_id, turn=turn, harness=harness, model=model
    )


def end_turn_span(span: Span, result: RunResult | None, turn: int) -> None:
    """Set the outcome's attributes (stop reason, tokens, cost) and end the span."""
    if not span.recording:
        return
    span.set(turn=turn)
    if result is not None:
        span.set(
            stop_reason=result.stop_reason,
            is_error=result.is_error,
            cost_usd=result.cost_usd,
            input_tokens=result.usage.input_tokens,
            output_tokens=result.usage.output_tokens,
            duration_s=result.duration_s,
        )
        if result.is_error:
            span.fail(f"the turn ended with stop_reason={result.stop_reason}")
    span.end()


class ToolSpans:
    """One span per tool call of a turn, timed by the events' time-stamps, under ``parent``."""

    def __init__(self, parent: Span) -> None:
        self.parent = parent
        self._open: dict[str, Span] = {}

    def see(self, event: AgentEvent) -> None:
        """Feed every emitted event (already numbered and time-stamped)."""
        if not self.parent.recording:
            return
        if isinstance(event, ToolUseEvent):
            self._open[event.tool_use_id] = telemetry.start_span(
                "harness_run.tool",
                parent=self.parent,
                start_ns=int(event.ts * 1e9),
                tool=event.name,
                tool_id=event.tool_use_id,
                turn=event.turn,
            )
        elif isinstance(event, ToolResultEvent):
            span = self._open.pop(event.tool_use_id, None)
            if span is not None:
                span.set(tool_error=event.is_error)
                if event.is_error:
                    span.fail("the tool reported an error")
                span.end(int(event.ts * 1e9))

    def close(self) -> None:
        """End the calls that got no result (the turn was stopped)."""
        for span in self._open.values():
            span.set(tool_error=True)
            span.end()
        self._open.clear()
