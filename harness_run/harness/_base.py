"""The harness driver port: how a runtime launches one turn of a harness CLI and reads it back."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, cast

from harness_run.errors import UsageError
from harness_run.events import AgentEvent, RunResult, StopReason
from harness_run.spec import AgentSpec

__all__ = [
    "HarnessDriver",
    "JsonLinesParser",
    "LaunchPlan",
    "LineParser",
    "StopRequest",
    "TurnContext",
    "as_dict",
    "as_dicts",
    "as_strs",
    "opt_int",
    "opt_str",
    "refuse",
]


def as_dict(value: Any) -> dict[str, Any]:
    """``value`` if it is a JSON object, else ``{}`` (harness output is read defensively)."""
    return cast(dict[str, Any], value) if isinstance(value, dict) else {}


def as_dicts(value: Any) -> list[dict[str, Any]]:
    """The JSON objects in ``value`` if it is a list, else ``[]``."""
    items = cast(list[Any], value) if isinstance(value, list) else []
    return [cast(dict[str, Any], v) for v in items if isinstance(v, dict)]


def as_strs(value: Any) -> list[str]:
    """The strings in ``value`` if it is a list, else ``[]``."""
    items = cast(list[Any], value) if isinstance(value, list) else []
    return [v for v in items if isinstance(v, str)]


def opt_str(value: Any) -> str | None:
    """``value`` if it is a non-empty string, else None."""
    return value if isinstance(value, str) and value else None


def opt_int(value: Any) -> int | None:
    """``value`` as an int if it is a JSON number (not a bool), else None."""
    return int(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


@dataclass(frozen=True, slots=True)
class TurnContext:
    """Everything a driver needs for one turn. ``spec`` is the effective spec (overlays applied)."""

    spec: AgentSpec
    prompt: str
    session_id: str
    turn: int
    workspace: Path
    home: Path
    env: Mapping[str, str]
    resume: bool
    """True when the harness already has a native session to continue."""
    native_session_id: str | None = None
    prompt_overridden: bool = False
    """True when this turn's system prompt differs from the session's (no prompt snapshot)."""
    binary: str | None = None
    skills_dir: Path | None = None


@dataclass(frozen=True, slots=True)
class LaunchPlan:
    argv: list[str]
    env: dict[str, str]
    stdin: bytes | None = None
    """Written to stdin at start. With ``keep_stdin_open`` stdin stays open for steering."""
    keep_stdin_open: bool = False
    files: dict[Path, str] = field(default_factory=dict[Path, str])
    """Config files to write before launch (absolute path -> text)."""


@dataclass(frozen=True, slots=True)
class StopRequest:
    """A parser's request to stop the turn now (a limit the CLI cannot enforce itself was reached)."""

    reason: StopReason
    message: str


def refuse(harness: str, problems: list[tuple[str, str]]) -> None:
    """Raise one :class:`UsageError` listing every ``(field, why)`` the harness cannot honour."""
    if not problems:
        return
    lines = "\n".join(f"  - {field}: {why}" for field, why in problems)
    fields = ", ".join(dict.fromkeys(field for field, _ in problems))
    raise UsageError(
        f"the {harness} harness cannot honour {fields}:\n{lines}\n"
        f"remove them for {harness} sessions (e.g. SessionConfig/TurnConfig overrides) or use another harness"
    )


class LineParser(Protocol):
    """Stateful translation of one turn's stdout lines into events and a result."""

    def feed(self, line: str) -> list[AgentEvent]:
        """Events for one stdout line (may be none). Must not raise on odd input."""
        ...

    @property
    def finished(self) -> bool:
        """True once the harness has reported its final result for the turn."""
        ...

    @property
    def stop_request(self) -> StopRequest | None:
        """Set once the turn must be stopped (``max_turns``/``max_budget`` watched by the parser):
        the process then stops the CLI's process group and the result gets this stop reason."""
        ...

    def finish(self, exit_code: int | None, stderr_tail: str) -> RunResult:
        """The turn's result once the process has ended (or was stopped)."""
        ...


class HarnessDriver(Protocol):
    """One harness CLI. Contract:

    - ``locate()`` returns the binary path or raises ``HarnessNotFoundError`` saying how to install it;
    - ``check(spec)`` raises ``UsageError`` naming every field of the (effective) spec this harness
      cannot honour — before anything starts; nothing is silently ignored. ``launch`` checks too;
    - ``steering`` says whether ``steer()`` can deliver a message into a running turn;
    - ``keeps_process`` says whether the CLI takes its next turn's prompt on the same stdin after a
      result line (a session's process kept between turns; the next turn writes ``launch().stdin``);
    - ``launch(ctx)`` is pure: argv, env and config files for the turn (no secret values in argv);
    - ``parser(ctx)`` returns a fresh ``LineParser`` for the turn;
    - ``steer(text)`` returns the bytes to write to stdin to add a user message mid-turn, or None;
    - ``skills_dir(workspace, home)`` is where skills are staged for the session;
    - ``native_files(ctx)`` lists the harness's own session files (transcripts) to checkpoint, all
      under ``native_root(ctx)``; they are restored there, at the same relative paths, to resume.
    """

    name: str
    steering: bool
    keeps_process: bool

    def locate(self, override: str | None = None) -> str: ...

    def check(self, spec: AgentSpec) -> None: ...

    def launch(self, ctx: TurnContext) -> LaunchPlan: ...

    def parser(self, ctx: TurnContext) -> LineParser: ...

    def steer(self, text: str) -> bytes | None: ...

    def native_files(self, ctx: TurnContext) -> list[Path]: ...

    def native_root(self, ctx: TurnContext) -> Path: ...

    def skills_dir(self, workspace: Path, home: Path) -> Path:
        """Where this harness discovers skills for a session (each skill in ``<dir>/<name>/``)."""
        ...


class JsonLinesParser:
    """The framing every harness shares: one JSON object per stdout line. Anything else — and any
    object whose shape a subclass's ``_event`` cannot read — is kept in ``unparsed`` for the error
    message, never raised: odd output must not break a turn."""

    def __init__(self) -> None:
        self.unparsed: list[str] = []
        self._stop: StopRequest | None = None

    @property
    def stop_request(self) -> StopRequest | None:
        return self._stop

    def feed(self, line: str) -> list[AgentEvent]:
        try:
            data = json.loads(line)
        except ValueError:
            data = None
        if not isinstance(data, dict):
            if line.strip():
                self.unparsed.append(line.strip()[:500])
            return []
        try:
            return self._event(cast(dict[str, Any], data))
        except (AttributeError, TypeError, ValueError) as exc:
            self.unparsed.append(f"{type(exc).__name__}: {line.strip()[:400]}")
            return []

    def _event(self, data: dict[str, Any]) -> list[AgentEvent]:
        raise NotImplementedError

    def with_unparsed(self, command: str, detail: str) -> str:
        """``detail`` (e.g. the stderr tail) led by the last line we could not read, if any."""
        detail = detail or "no output"
        if self.unparsed:
            return f"unexpected output from {command}: {self.unparsed[-1]!r}\n{detail}"
        return detail
