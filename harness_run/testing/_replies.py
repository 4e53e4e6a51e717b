"""What the scripted model answers: :class:`Reply` (one model response) and its parts.

A reply is built with the module functions (``text``, ``tool_call``, ``shell``, ``write_file``,
``structured``, ``error``, ``drop``) or the same-named classmethods on :class:`Reply`. Every
constructor takes the same keyword options: ``thinking`` (reasoning text streamed before the answer),
``usage`` (token counts; a :class:`Usage` or a mapping of its field names) and ``delay`` (seconds to
wait before the first byte). ``combine(a, b, …)`` / ``a.then(b)`` puts several parts (for example two
tool calls) in one reply.

Parts ``shell`` and ``write_file`` are *intents*: the server turns them into the tool call the client
offered in that very request (``Bash``/``Write`` for Claude Code, ``exec_command``/``shell`` for
Codex, ``bash``/``write`` for OpenCode). ``tool_call`` is sent exactly as given.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "HttpError",
    "Part",
    "Reply",
    "Shell",
    "Structured",
    "Text",
    "ToolCall",
    "Usage",
    "UsageLike",
    "WriteFile",
    "combine",
    "drop",
    "error",
    "shell",
    "structured",
    "text",
    "tool_call",
    "write_file",
]


@dataclass(frozen=True, slots=True)
class Usage:
    """Token counts reported with a reply (mapped onto each API's usage object).

    The defaults are small non-zero numbers so that "usage is reported" can be asserted.
    """

    input_tokens: int = 12
    output_tokens: int = 8
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    reasoning_tokens: int = 0

    @classmethod
    def coerce(cls, value: UsageLike | None) -> Usage:
        """A :class:`Usage` from ``None`` (defaults), a ``Usage`` or a mapping of field names."""
        if value is None:
            return cls()
        if isinstance(value, Usage):
            return value
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(value) - names)
        if unknown:
            raise ValueError(f"unknown usage field(s) {unknown}; expected some of {sorted(names)}")
        for key, count in value.items():
            ok = type(count) is int and count >= 0  # pyright: ignore[reportUnnecessaryComparison]
            if not ok:
                raise ValueError(f"usage.{key} must be a non-negative integer, got {count!r}")
        return cls(**dict(value))


UsageLike = Usage | Mapping[str, int]


@dataclass(frozen=True, slots=True)
class Text:
    """Assistant text."""

    text: str


@dataclass(frozen=True, slots=True)
class ToolCall:
    """A raw tool call: ``name`` and ``input`` are sent exactly as given."""

    name: str
    input: Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class Shell:
    """Intent: run ``command`` with whichever shell tool the client offers."""

    command: str


@dataclass(frozen=True, slots=True)
class WriteFile:
    """Intent: write ``content`` to ``path`` with the client's file-writing tool (or its shell)."""

    path: str
    content: str


@dataclass(frozen=True, slots=True)
class Structured:
    """The final structured answer: the ``StructuredOutput`` tool where offered, else JSON text."""

    value: Any


Part = Text | ToolCall | Shell | WriteFile | Structured


@dataclass(frozen=True, slots=True)
class HttpError:
    """Answer with an HTTP error in the API's own error shape."""

    status: int
    message: str
    type: str | None = None  # the API error type; derived from the status when None


@dataclass(frozen=True)
class Reply:
    """One scripted model response.

    Attributes:
        parts: text and tool calls, in order.
        thinking: reasoning text streamed before the parts (``None`` = none).
        usage: token counts reported for this response.
        delay: seconds to wait before answering.
        http_error: when set, answer with this HTTP error instead of a response.
        drop_connection: start streaming, then cut the connection mid-stream.
        stop_reason: override the stop reason (default: tool use if any tool call, else end of turn).
        sticky: for ``error()``/``drop()``: the client's identical retries of the failed request get
            the same failure without consuming the script (a persistently failing server). With
            ``sticky=False`` a retry takes the next reply (to test recovery).
    """

    parts: tuple[Part, ...] = ()
    thinking: str | None = None
    usage: Usage = field(default_factory=Usage)
    delay: float = 0.0
    http_error: HttpError | None = None
    drop_connection: bool = False
    stop_reason: str | None = None
    sticky: bool = True

    def __post_init__(self) -> None:
        if self.delay < 0:
            raise ValueError(f"delay must be >= 0 seconds, got {self.delay!r}")

    # -- constructors ------------------------------------------------------------------------

    @classmethod
    def _make(
        cls,
        parts: tuple[Part, ...],
        *,
        thinking: str | None = None,
        usage: UsageLike | None = None,
        delay: float = 0.0,
        http_error: HttpError | None = None,
        drop_connection: bool = False,
    ) -> Reply:
        return cls(
            parts=parts,
            thinking=thinking,
            usage=Usage.coerce(usage),
            delay=float(delay),
            http_error=http_error,
            drop_connection=drop_connection,
        )

    @classmethod
    def text(
        cls, text: str, *, thinking: str | None = None, usage: UsageLike | None = None, delay: float = 0.0
    ) -> Reply:
        """Answer with assistant text (ends the turn)."""
        return cls._make((Text(text),), thinking=thinking, usage=usage, delay=delay)

    @classmethod
    def tool_call(
        cls,
        name: str,
        input: Mapping[str, Any] | None = None,
        *,
        thinking: str | None = None,
        usage: UsageLike | None = None,
        delay: float = 0.0,
    ) -> Reply:
        """Call tool ``name`` with ``input`` exactly as given."""
        return cls._make((ToolCall(name, dict(input or {})),), thinking=thinking, usage=usage, delay=delay)

    @classmethod
    def shell(
        cls, command: str, *, thinking: str | None = None, usage: UsageLike | None = None, delay: float = 0.0
    ) -> Reply:
        """Run ``command`` with the shell tool the client offers (``Bash``, ``exec_command``, ``bash``…)."""
        return cls._make((Shell(command),), thinking=thinking, usage=usage, delay=delay)

    @classmethod
    def write_file(
        cls,
        path: str,
        content: str,
        *,
        thinking: str | None = None,
        usage: UsageLike | None = None,
        delay: float = 0.0,
    ) -> Reply:
        """Write a file with the client's write tool (``Write``, ``write``; Codex: its shell tool).

        A relative ``path`` is resolved against the working directory the client reports in its
        prompt where the tool needs an absolute path (Claude Code's ``Write``).
        """
        return cls._make((WriteFile(path, content),), thinking=thinking, usage=usage, delay=delay)

    @classmethod
    def structured(
        cls, value: Any, *, thinking: str | None = None, usage: UsageLike | None = None, delay: float = 0.0
    ) -> Reply:
        """Give the final structured answer (Claude Code: its ``StructuredOutput`` tool; else JSON text)."""
        return cls._make((Structured(value),), thinking=thinking, usage=usage, delay=delay)

    @classmethod
    def error(
        cls,
        status: int = 500,
        message: str = "scripted error",
        *,
        delay: float = 0.0,
        type: str | None = None,
        sticky: bool = True,
    ) -> Reply:
        """Answer with HTTP ``status`` and the API's error JSON carrying ``message``.

        Clients retry some errors (Claude Code retries a 400 once without an optional beta, Codex
        retries 5xx): with ``sticky`` (default) those identical retries get the same error.
        """
        if not 400 <= status <= 599:
            raise ValueError(f"error status must be 400-599, got {status!r}")
        reply = cls._make((), delay=delay, http_error=HttpError(status, message, type))
        return reply if sticky else dataclasses.replace(reply, sticky=False)

    @classmethod
    def drop(cls, partial_text: str = "", *, delay: float = 0.0, sticky: bool = True) -> Reply:
        """Start a streamed answer (optionally with ``partial_text``), then cut the connection.

        A non-streamed request is cut before any byte. Claude Code answers a broken stream with a
        non-streamed retry of the same request: with ``sticky`` (default) it is cut too.
        """
        parts: tuple[Part, ...] = (Text(partial_text),) if partial_text else ()
        reply = cls._make(parts, delay=delay, drop_connection=True)
        return reply if sticky else dataclasses.replace(reply, sticky=False)

    # -- modifiers ---------------------------------------------------------------------------

    def then(self, *others: Reply) -> Reply:
        """This reply with the parts of ``others`` appended (options stay this reply's)."""
        return combine(self, *others)

    def with_options(
        self,
        *,
        thinking: str | None = None,
        usage: UsageLike | None = None,
        delay: float | None = None,
        stop_reason: str | None = None,
    ) -> Reply:
        """A copy with the given options replaced (``None`` keeps the current value)."""
        return dataclasses.replace(
            self,
            thinking=self.thinking if thinking is None else thinking,
            usage=self.usage if usage is None else Usage.coerce(usage),
            delay=self.delay if delay is None else float(delay),
            stop_reason=self.stop_reason if stop_reason is None else stop_reason,
        )

    @property
    def has_tool_calls(self) -> bool:
        """Whether any part is a tool call or a tool intent."""
        return any(not isinstance(p, Text) for p in self.parts)

    def describe(self) -> str:
        """A short human-readable summary (used in logs and error messages)."""
        if self.http_error is not None:
            return f"error({self.http_error.status}, {self.http_error.message!r})"
        if self.drop_connection:
            return "drop()"
        return " + ".join(_describe_part(p) for p in self.parts) or "empty()"


def _describe_part(part: Part) -> str:
    match part:
        case Text(text=t):
            return f"text({t[:40]!r})"
        case ToolCall(name=n):
            return f"tool_call({n!r})"
        case Shell(command=c):
            return f"shell({c[:40]!r})"
        case WriteFile(path=p):
            return f"write_file({p!r})"
        case Structured():
            return "structured(...)"


def combine(*replies: Reply) -> Reply:
    """One reply with the parts of all ``replies`` in order; options come from the first."""
    if not replies:
        raise ValueError("combine() needs at least one reply")
    first = replies[0]
    for other in replies:
        if other.http_error is not None or other.drop_connection:
            raise ValueError("error() and drop() replies cannot be combined with others")
    parts = tuple(p for r in replies for p in r.parts)
    thinking = first.thinking or next((r.thinking for r in replies if r.thinking), None)
    return dataclasses.replace(first, parts=parts, thinking=thinking)


text = Reply.text
tool_call = Reply.tool_call
shell = Reply.shell
write_file = Reply.write_file
structured = Reply.structured
error = Reply.error
drop = Reply.drop
