"""Showing events and results: a live, readable view on a terminal (rich), plain lines otherwise,
or JSON lines with ``--json``. rich is imported only when drawing to a terminal. Text from the agent,
its tools or the store goes out without control characters (``_text``): none acts on a terminal."""

from __future__ import annotations

import json
import sys
from typing import Any, TextIO

from harness_run.cli._text import json_line, safe
from harness_run.events import (
    AgentEvent,
    ApprovalDecisionEvent,
    ApprovalRequestEvent,
    DeltaEvent,
    MessageEvent,
    QuestionAnswerEvent,
    QuestionEvent,
    RunResult,
)

__all__ = ["EventView", "format_result"]

_MAX = 400


def _short(text: str, limit: int = _MAX) -> str:
    text = text.strip()
    return text if len(text) <= limit else text[: limit - 1] + "…"


def describe(event: AgentEvent) -> tuple[str, str] | None:
    """(label, text) for one event, or None to hide it."""
    match event.type:
        case "user":
            return "you", event.text
        case "message":
            return "agent", event.text
        case "thinking":
            return "thinking", _short(event.text, 200)
        case "tool_use":
            args = event.input.get("command") or event.input.get("file_path") or json.dumps(event.input)
            return f"tool {event.name}", _short(str(args), 200)
        case "tool_result":
            return "error" if event.is_error else "output", _short(event.content or "(no output)")
        case "setup":
            return "setup", event.step
        case "started":
            return "started", f"{event.harness} {event.harness_version or ''}".strip() + f", {event.model}"
        case "retry" | "warning":
            return event.type, event.message
        case "cost_unknown":
            return "cost", event.message
        case "error":
            return "error", event.message
        case "approval_request" | "approval_decision" | "question" | "question_answer":
            return _person(event)
        case "result" | "delta":  # a delta's text comes whole in the message event that follows
            return None


def _person(event: AgentEvent) -> tuple[str, str] | None:
    """A tool call waiting for a person, a question, and their outcomes."""
    if isinstance(event, ApprovalRequestEvent):
        return "approval?", _short(
            event.command or event.path or f"{event.tool} {json.dumps(event.input)}", 200
        )
    if isinstance(event, ApprovalDecisionEvent):
        return "approval", f"{event.decision} ({event.by})" + (f": {event.reason}" if event.reason else "")
    if isinstance(event, QuestionEvent):
        return "question", _short(event.question, 200)
    if isinstance(event, QuestionAnswerEvent):
        return "answer", "(none)" if event.answer is None else _short(event.answer, 200)
    return None


def format_result(result: RunResult) -> list[tuple[str, str]]:
    cost = "unknown" if result.cost_usd is None else f"${result.cost_usd:.6f}"
    u = result.usage
    rows = [
        ("status", "error" if result.is_error else "ok"),
        ("stop reason", result.stop_reason),
        ("session", result.session_id),
        ("turn", str(result.turn)),
        ("model calls", str(result.num_turns)),
        (
            "tokens",
            f"in {u.input_tokens}, out {u.output_tokens}, cache read {u.cache_read_tokens}, "
            f"cache write {u.cache_write_tokens}",
        ),
        ("cost", cost),
        ("duration", f"{result.duration_s:.2f} s"),
    ]
    if result.resources is not None:
        r = result.resources
        rows.append(("resources", f"cpu {r.cpu_seconds:.2f} s, peak memory {r.peak_memory_mb:.0f} MB"))
    if result.error:
        rows.insert(1, ("error", result.error))
    return rows


class EventView:
    def __init__(self, *, as_json: bool, stream: TextIO | None = None) -> None:
        self.stream = stream or sys.stdout
        self.as_json = as_json
        self._console: Any = None
        self._open: str | None = None
        self._open_line = False
        if not as_json and self.stream.isatty():
            try:
                from rich.console import Console
            except ImportError:  # rich comes with the `local` extra; plain text without it
                pass
            else:
                self._console = Console(file=self.stream, highlight=False)

    def event(self, event: AgentEvent) -> None:
        if self.as_json:
            self.stream.write(json_line(event.model_dump_json(exclude={"raw"})) + "\n")
            self.stream.flush()
            return
        if self._console is not None and self._streamed(event):
            return
        row = describe(event)
        if row is None:
            return
        label, text = safe(row[0]), safe(row[1])
        if self._console is not None:
            from rich.markup import escape

            style = {"agent": "bold green", "you": "bold cyan", "error": "bold red"}.get(label, "dim")
            self._console.print(f"[{style}]{escape(label):>10}[/] {escape(text)}")
        else:
            self.stream.write(f"{label:>10}  {text}\n")
            self.stream.flush()

    def _streamed(self, event: AgentEvent) -> bool:
        """On a terminal, assistant text is written as its deltas arrive (after the ``agent``
        label); its ``message`` then only ends the line. True when ``event`` was drawn so."""
        if isinstance(event, DeltaEvent):
            if self._open != event.message_id or not self._open_line:
                self._end_line()
                self._console.print(f"[bold green]{'agent':>10}[/] ", end="")
            self._open, self._open_line = event.message_id, True
            self._console.file.write(safe(event.text))
            self._console.file.flush()
            return True
        streamed = isinstance(event, MessageEvent) and self._open_line and self._open == event.message_id
        self._end_line()
        return streamed

    def _end_line(self) -> None:
        if self._open_line:
            self._console.file.write("\n")
            self._open_line = False

    def result(self, result: RunResult) -> None:
        if self.as_json:
            return  # the result event was already printed
        rows = [(key, safe(value)) for key, value in format_result(result)]
        text = safe(result.text)
        if self._console is not None:
            from rich.table import Table
            from rich.text import Text

            table = Table(show_header=False, box=None, padding=(0, 1))
            for key, value in rows:
                table.add_row(f"[bold]{key}[/]", Text(value))  # a Text: no markup read in it
            self._console.rule("result")
            if text:
                self._console.print(text, markup=False)
            self._console.print(table)
        else:
            self.stream.write("--- result ---\n")
            if text:
                self.stream.write(text + "\n")
            for key, value in rows:
                self.stream.write(f"{key}: {value}\n")
            self.stream.flush()
