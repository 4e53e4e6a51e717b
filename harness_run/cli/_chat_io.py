"""``harness-run chat``'s terminal: where lines come from (prompt_toolkit on a terminal, plain lines
from a pipe) and how a turn is drawn (rich): streamed text as it arrives, tool calls on one line."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import sys
import threading
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

from harness_run.cli._text import safe
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

__all__ = ["ChatView", "Lines", "PipeLines", "TerminalLines", "open_history"]

PROMPT = "chat> "
_FOLD = 72


class Lines(Protocol):
    """The user's lines: :meth:`read` at the idle prompt; while a turn runs, :meth:`watch` hands
    each line to a callback at once (``/interrupt``) and keeps the rest for the next :meth:`read`."""

    async def read(self) -> str | None:
        """The next line; None at end of input (Ctrl-D, or the pipe ended)."""
        ...

    def watch(self, on_line: Callable[[str], bool]) -> None:
        """Until :meth:`unwatch`: each new line (stripped; empty ones too: Enter answers an approval
        prompt) goes to ``on_line``; when it returns False the line is kept for :meth:`read`."""
        ...

    def unwatch(self) -> None: ...


def open_history(path: Path) -> Path:
    """The prompt history file, made private (0600, its folder 0700) before anything is written."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    fd = os.open(path, os.O_CREAT | os.O_WRONLY | os.O_APPEND, 0o600)
    os.close(fd)
    os.chmod(path, 0o600)
    return path


class TerminalLines:
    """A terminal: prompt_toolkit edits the line (history in ``history``, up-arrow recalls it); while
    a turn runs the terminal is in its normal mode, so Ctrl-C is a SIGINT and a typed line arrives
    when Enter is pressed."""

    def __init__(self, history: Path) -> None:
        from prompt_toolkit import PromptSession
        from prompt_toolkit.history import FileHistory

        self._history = FileHistory(str(history))
        self._prompt: PromptSession[str] = PromptSession(history=self._history)
        self._kept: deque[str] = deque()
        self._partial = ""
        self._watching = False

    async def read(self) -> str | None:
        if self._kept:
            line = self._kept.popleft()
            sys.stdout.write(f"{PROMPT}{line}\n")
            return line
        try:
            return await self._prompt.prompt_async(PROMPT)
        except EOFError:
            return None

    def watch(self, on_line: Callable[[str], bool]) -> None:
        fd = sys.stdin.fileno()

        def readable() -> None:
            try:
                data = os.read(fd, 65536).decode(errors="replace")
            except OSError:
                data = ""
            if not data:  # the terminal went away
                asyncio.get_running_loop().remove_reader(fd)
                self._watching = False
                return
            *lines, self._partial = (self._partial + data).split("\n")
            for line in lines:
                line = line.rstrip("\r").strip()
                if not on_line(line) and line:  # an empty line may answer an approval prompt
                    self._kept.append(line)
                    self._history.append_string(line)

        asyncio.get_running_loop().add_reader(fd, readable)
        self._watching = True

    def unwatch(self) -> None:
        if self._watching:
            asyncio.get_running_loop().remove_reader(sys.stdin.fileno())
            self._watching = False


class PipeLines:
    """Standard input that is not a terminal (a pipe, a file): one line at a time, no editing; a
    thread reads ahead so that ``/interrupt`` reaches a running turn."""

    def __init__(self) -> None:
        self._queue: asyncio.Queue[str | None] = asyncio.Queue()
        self._kept: deque[str | None] = deque()
        self._watcher: asyncio.Task[None] | None = None
        loop = asyncio.get_running_loop()

        def pump() -> None:
            for line in sys.stdin:
                loop.call_soon_threadsafe(self._queue.put_nowait, line.rstrip("\n"))
            loop.call_soon_threadsafe(self._queue.put_nowait, None)

        threading.Thread(target=pump, name="harness-run chat input", daemon=True).start()

    async def read(self) -> str | None:
        line = self._kept.popleft() if self._kept else await self._queue.get()
        if line is not None:
            sys.stdout.write(f"{PROMPT}{line}\n")
        return line

    def watch(self, on_line: Callable[[str], bool]) -> None:
        async def watching() -> None:
            while True:
                line = await self._queue.get()
                if line is None or not on_line(line.strip()):
                    self._kept.append(line)

        self._watcher = asyncio.ensure_future(watching())

    def unwatch(self) -> None:
        if self._watcher is not None:
            self._watcher.cancel()
            self._watcher = None


def _fold(text: str, limit: int = _FOLD) -> str:
    """One line of at most ``limit`` characters, with how many more lines there were."""
    lines = text.strip().splitlines() or [""]
    first = lines[0] if len(lines[0]) <= limit else lines[0][: limit - 1] + "…"
    return first + (f" (+{len(lines) - 1} lines)" if len(lines) > 1 else "")


def tool_summary(name: str, tool_input: dict[str, Any]) -> str:
    """``Name(short input)``: the command, path or pattern a tool call is about, else its JSON."""
    for key in ("command", "cmd", "file_path", "path", "pattern", "url", "query", "description"):
        value = tool_input.get(key)
        if isinstance(value, str | list) and value:
            shown = " ".join(map(str, value)) if isinstance(value, list) else value  # pyright: ignore[reportUnknownArgumentType]
            return f"{name}({_fold(shown, 60)})"
    return f"{name}({_fold(json.dumps(tool_input, sort_keys=True), 60)})" if tool_input else name


class ChatView:
    """Draws a session's events: deltas written as they come (the ``message`` that follows only
    ends the line), everything else one line each. All text goes out without control characters
    (``_text.safe``): what the agent, a tool or a server says never acts on the terminal."""

    def __init__(self, stream: Any = None) -> None:
        from rich.console import Console

        self.console = Console(file=stream or sys.stdout, highlight=False, soft_wrap=True)
        self._open: str | None = None
        """The message id whose streamed text is on the current line (None: no open line)."""
        self._streamed: set[str] = set()

    def _close_line(self) -> None:
        if self._open is not None:
            self.console.file.write("\n")
            self.console.file.flush()
            self._open = None

    def line(self, text: str, style: str = "") -> None:
        """One line (markup-free, control characters removed), after any streamed text."""
        self._close_line()
        self.console.print(safe(text), style=style or None, markup=False)

    def event(self, event: AgentEvent) -> None:
        key = (event.message_id or "") if isinstance(event, DeltaEvent | MessageEvent) else ""
        match event.type:
            case "delta":
                if self._open != key:
                    self._close_line()
                self._open = key
                self._streamed.add(key)
                self.console.file.write(safe(event.text))
                self.console.file.flush()
            case "message":
                if key in self._streamed and self._open == key:
                    self._close_line()  # its text is on screen already
                elif key not in self._streamed or not event.message_id:
                    self.line(event.text)
            case "tool_use":
                self.line(f"⏺ {tool_summary(event.name, event.input)}", "cyan")
            case "tool_result":
                shown = _fold(event.content or "(no output)")
                self.line(f"  ⎿ {shown}", "red" if event.is_error else "dim")
            case "thinking":
                self.line(f"✻ {_fold(event.text)}", "dim italic")
            case "setup":
                self.line(f"· {event.step}", "dim")
            case "retry" | "warning" | "cost_unknown":
                self.line(f"! {event.message}", "yellow")
            case "error":
                self.line(f"✗ {event.message}", "red")
            case "result":
                self.result(event.result)
            case _:  # user, started: nothing to show
                self._person(event)

    def _person(self, event: AgentEvent) -> None:
        """A request for a person (approval, question) or its outcome, on its own lines; other
        events show nothing."""
        if isinstance(event, ApprovalRequestEvent):
            what = event.command or event.path or tool_summary(event.tool, event.input)
            self.line(f"? {event.tool} wants to run: {_fold(what, 200)}", "bold yellow")
            if event.diff:
                for text in event.diff.splitlines()[:40]:
                    style = "green" if text.startswith("+") else "red" if text.startswith("-") else "dim"
                    self.line(f"    {text}", style)
            left = max(0, round(event.expires_at - time.time()))
            self.line(f"  (denied in {left} s if nobody answers; /interrupt stops the turn)", "dim")
        elif isinstance(event, ApprovalDecisionEvent):
            who = "timed out" if event.by == "timeout" else f"by {event.key_id or 'a client'}"
            verdict = "allowed" if event.decision == "allow" else "denied"
            reason = f": {event.reason}" if event.reason else ""
            self.line(f"  {verdict} ({who}){reason}", "green" if verdict == "allowed" else "red")
        elif isinstance(event, QuestionEvent):
            self.line(f"? the agent asks: {event.question}", "bold yellow")
            for number, option in enumerate(event.options, 1):
                self.line(f"    {number}. {option}")
        elif isinstance(event, QuestionAnswerEvent):
            who = "timed out" if event.by == "timeout" else f"by {event.key_id or 'a client'}"
            shown = "(no answer)" if event.answer is None else _fold(event.answer, 200)
            self.line(f"  answered {shown} ({who})", "dim")

    def ask(self, text: str) -> None:
        """A prompt on its own line's end (the user's typed answer follows it)."""
        self._close_line()
        self.console.print(safe(text), style="bold", markup=False, end="")
        self.console.file.flush()

    def result(self, result: RunResult) -> None:
        cost = "cost unknown" if result.cost_usd is None else f"${result.cost_usd:.6f}"
        parts = [result.stop_reason, f"{result.num_turns} model calls", cost, f"{result.duration_s:.1f} s"]
        self.line("─ " + " · ".join(parts), "red" if result.is_error else "dim")
        if result.is_error and result.error:
            self.line(f"✗ {result.error}", "red")
        self._streamed.clear()


def install_sigint(handler: Callable[[], None]) -> Callable[[], None]:
    """Ctrl-C calls ``handler`` on the event loop (instead of raising KeyboardInterrupt); returns
    the function that removes it."""
    import signal

    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGINT, handler)

    def remove() -> None:
        with contextlib.suppress(Exception):
            loop.remove_signal_handler(signal.SIGINT)

    return remove
