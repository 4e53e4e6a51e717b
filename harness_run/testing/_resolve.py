"""Turn a reply's parts into concrete text and tool calls for one request.

Intents pick the tool the client offered in *this* request, first match wins:

* ``shell(cmd)``: ``Bash {command}`` (Claude Code) → ``exec_command {cmd}`` (Codex) →
  ``shell_command {command}`` (older Codex) → ``bash {command, description}`` (OpenCode) →
  ``shell {command: ["bash", "-lc", cmd]}`` (oldest Codex). Nothing offered: the API's usual name.
* ``write_file(path, content)``: ``Write {file_path, content}`` (Claude Code, path made absolute
  with the reported working directory) → ``write {filePath, content}`` (OpenCode) → otherwise the
  shell intent with ``mkdir -p … && printf '%s' … > path`` (Codex).
* ``structured(obj)``: ``StructuredOutput`` with ``obj`` as input where offered, else JSON text.
"""

from __future__ import annotations

import json
import posixpath
import shlex
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from harness_run.testing._replies import Reply, Shell, Structured, Text, ToolCall, WriteFile
from harness_run.testing._requests import RecordedRequest

__all__ = ["TextOut", "ToolOut", "resolve"]


@dataclass(frozen=True, slots=True)
class TextOut:
    """Concrete assistant text."""

    text: str


@dataclass(frozen=True, slots=True)
class ToolOut:
    """A concrete tool call."""

    name: str
    arguments: dict[str, Any]

    @property
    def arguments_json(self) -> str:
        return json.dumps(self.arguments)


Out = TextOut | ToolOut

_SHELL_TOOLS: tuple[tuple[str, Callable[[str], dict[str, Any]]], ...] = (
    ("Bash", lambda c: {"command": c}),
    ("exec_command", lambda c: {"cmd": c}),
    ("shell_command", lambda c: {"command": c}),
    ("bash", lambda c: {"command": c, "description": "Run a shell command"}),
    ("shell", lambda c: {"command": ["bash", "-lc", c]}),
)
_DEFAULT_SHELL = {"anthropic": "Bash", "responses": "exec_command", "chat": "bash"}


def resolve(reply: Reply, request: RecordedRequest) -> list[Out]:
    """The concrete outputs of ``reply`` for ``request`` (intents mapped to offered tools)."""
    offered = set(request.tool_names)
    out: list[Out] = []
    for part in reply.parts:
        match part:
            case Text(text=t):
                out.append(TextOut(t))
            case ToolCall(name=n, input=i):
                out.append(ToolOut(n, dict(i)))
            case Shell(command=c):
                out.append(_shell(c, offered, request))
            case WriteFile(path=p, content=content):
                out.append(_write(p, content, offered, request))
            case Structured(value=v):
                if "StructuredOutput" in offered and isinstance(v, dict):
                    out.append(ToolOut("StructuredOutput", dict(v)))  # pyright: ignore[reportUnknownArgumentType]
                else:
                    out.append(TextOut(json.dumps(v)))
    return out


def _shell(command: str, offered: set[str], request: RecordedRequest) -> ToolOut:
    for name, build in _SHELL_TOOLS:
        if name in offered:
            return ToolOut(name, build(command))
    name = _DEFAULT_SHELL.get(request.api, "bash")
    return ToolOut(name, dict(_SHELL_TOOLS)[name](command))


def _absolute(path: str, request: RecordedRequest) -> str:
    if posixpath.isabs(path):
        return path
    cwd = request.cwd
    return posixpath.normpath(posixpath.join(cwd, path)) if cwd else path


def _write(path: str, content: str, offered: set[str], request: RecordedRequest) -> ToolOut:
    if "Write" in offered or (request.api == "anthropic" and not offered):
        return ToolOut("Write", {"file_path": _absolute(path, request), "content": content})
    if "write" in offered:
        return ToolOut("write", {"filePath": _absolute(path, request), "content": content})
    parent = posixpath.dirname(path)
    command = f"printf '%s' {shlex.quote(content)} > {shlex.quote(path)}"
    if parent:
        command = f"mkdir -p {shlex.quote(parent)} && {command}"
    return _shell(command, offered, request)
