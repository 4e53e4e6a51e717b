"""Codex driver: ``codex app-server`` behind a bridge that prints ``codex exec --json`` lines; the
session's process, kept between its turns.

The binary comes from the pinned ``openai-codex-cli-bin`` wheel (the ``local`` extra), located
without importing it. Each session has its own ``CODEX_HOME`` (``<home>/.codex``) with a generated
``config.toml``: MCP servers and permissions (:func:`codex_files`), the model provider,
instructions and offline switches (no secret values: the key travels in the variable ``env_key``
names). The process is ``python _codex_bridge.py <codex>`` (see ``_codex_bridge.py``): it runs
``codex app-server`` and takes each turn as one JSON line on stdin (prompt, thread id, model, output
schema), so argv, environment and config files are the same on every turn and the engine keeps the
process (``keeps_process``). Turn 1 starts a thread; a later turn in a fresh process resumes it by
the ``thread.started`` id. Every thread asks for ``bypass_hook_trust``: app-server (like ``codex
exec`` without ``--dangerously-bypass-hook-trust``) skips a hook no user trusted in its TUI, and
ours is the guard.

Verified with codex-cli 0.163.0 against the scripted model: ``OPENAI_BASE_URL`` is
ignored by Codex, so an endpoint becomes ``[model_providers.harness-run]``; the built-in OpenAI
provider reads its key only from ``CODEX_API_KEY``; ``developer_instructions`` adds a developer
message after Codex's prompt, ``model_instructions_file`` replaces that prompt (``base_instructions``
is ignored); skills are found in ``$CODEX_HOME/skills/<name>/SKILL.md``; ``turn.completed.usage`` is
cumulative over the thread (and misses stopped turns), so a turn's usage is the sum of the
``token_usage_record`` lines (one per model response) its rollout gained, which also give
``num_turns``.

Codex has no ``max_turns`` or budget options: :class:`TurnLimits` watches the rollout's usage records
(each written before the response's tool calls start) and stops the process group — the budget as
soon as the priced cost passes it, ``max_turns`` once the N-th response's tools have run. Refused
before launch (:meth:`CodexDriver.check`), never silently ignored: ``allowed_tools`` (Codex has no
allow list), ``disallowed_tools`` other than ``web_search``/``WebSearch`` and
``mcp__<server>__<tool>`` of the spec's servers, a budget for a model the price table does not know.
There is no steering yet (app-server's ``turn/steer`` is not wired). Model ids ``openrouter/<vendor>/<model>``
are sent as ``<vendor>/<model>``.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any, Final, cast

from harness_run.errors import UsageError
from harness_run.events import (
    AgentEvent,
    ErrorEvent,
    McpServerInfo,
    MessageEvent,
    RetryEvent,
    RunResult,
    StartedEvent,
    ThinkingEvent,
    ToolResultEvent,
    ToolUseEvent,
    Usage,
    WarningEvent,
)
from harness_run.harness._base import (
    JsonLinesParser,
    LaunchPlan,
    LineParser,
    TurnContext,
    as_dict,
    as_dicts,
    refuse,
)
from harness_run.harness._files import codex_files
from harness_run.harness._guard import WRITE_TOOLS
from harness_run.harness._limits import TurnLimits, budget_problem
from harness_run.harness._locate import BinarySource
from harness_run.harness._policy import guard_command, refuse_policy
from harness_run.spec import AgentSpec
from harness_run.vocab.pricing import rates, unknown_cost_event

__all__ = ["CodexDriver"]

_BRIDGE: Final = Path(__file__).with_name("_codex_bridge.py")
"""Run by the session's Python as the harness process: ``codex app-server`` spoken as ``codex exec``."""
PROVIDER = "harness-run"
RETRIES_ENV = "HARNESS_RUN_CODEX_MAX_RETRIES"
DEFAULT_RETRIES = 2
"""Request and stream retries of the endpoint provider unless the spec's ``env`` sets ``RETRIES_ENV``:
Codex's own 4/5 multiply (30 requests, ~30 s for a persistent 5xx); 2/2 end such a turn in seconds."""
_HIGH_DEMAND = "currently experiencing high demand"
_SHELL_EXCLUDES = (
    "OPENAI_API_KEY",
    "CODEX_API_KEY",
    "OPENROUTER_API_KEY",
    "ANTHROPIC_API_KEY",
    "ANTHROPIC_AUTH_TOKEN",
)
"""Optional (spec ``env``): request/stream retries of the endpoint provider (Codex's default: 4/5)."""
_WEB_SEARCH = frozenset({"web_search", "WebSearch"})
_SCHEMA_MAPS = frozenset({"properties", "$defs", "definitions", "patternProperties"})
_RECONNECTING = re.compile(r"Reconnecting\.\.\.\s*(\d+)/(\d+)")
_TOOL_ITEMS = frozenset({"command_execution", "mcp_tool_call", "file_change", "web_search"})
_INSTALL_HINT = (
    'install it with `pip install "harness-run[local]"` (the openai-codex-cli-bin wheel ships the '
    "binary), or `npm install -g @openai/codex`, or set HARNESS_RUN_CODEX_BIN"
)


_SOURCE = BinarySource(
    label="Codex",
    command="codex",
    env_var="HARNESS_RUN_CODEX_BIN",
    package="codex_cli_bin",
    relative="bin/codex",
    hint=_INSTALL_HINT,
)


def _dumps(data: Any) -> str:
    return json.dumps(data, sort_keys=True, separators=(",", ":"))


def strict_schema(schema: Any) -> Any:
    """Codex sends ``--output-schema`` as a *strict* JSON schema, which OpenAI accepts only when every
    object forbids other properties and requires all of its own: add that (pydantic leaves both
    out; the answer still validates into the model)."""
    if isinstance(schema, list):
        return [strict_schema(v) for v in cast(list[Any], schema)]
    if not isinstance(schema, dict):
        return schema
    out: dict[str, Any] = {}
    for key, value in cast(dict[str, Any], schema).items():
        if key in _SCHEMA_MAPS and isinstance(value, dict):
            out[key] = {k: strict_schema(v) for k, v in cast(dict[str, Any], value).items()}
        else:
            out[key] = strict_schema(value)
    if out.get("type") == "object" or isinstance(out.get("properties"), dict):
        out.setdefault("additionalProperties", False)
        if out["additionalProperties"] is False:
            out["required"] = list(as_dict(out.get("properties")))
    return out


def wire_model(model: str) -> str:
    """The model id the endpoint gets: ``openrouter/<vendor>/<model>`` -> ``<vendor>/<model>``."""
    return model.removeprefix("openrouter/") if model.count("/") >= 2 else model


class CodexDriver:
    name = "codex"
    steering = False
    keeps_process = True

    def locate(self, override: str | None = None) -> str:
        return _SOURCE.locate(override)

    def check(self, spec: AgentSpec) -> None:
        """Refuse what Codex cannot honour (see the module docstring), naming each field."""
        problems = [
            ("allowed_tools", f"Codex has no tool allow list ({', '.join(spec.allowed_tools)})")
            for _ in spec.allowed_tools[:1]
        ]
        servers = [s.name for s in spec.mcp_servers]
        other = [
            t
            for t in spec.disallowed_tools
            if t not in _WEB_SEARCH and not any(t.startswith(f"mcp__{s}__") for s in servers)
        ]
        if other:
            problems.append(
                (
                    "disallowed_tools",
                    f"Codex can only disable web_search and MCP tools (mcp__<server>__<tool>), not {other}",
                )
            )
        budget = budget_problem(spec, self.name)
        if budget is not None:
            problems.append(budget)
        approvals = spec.approvals
        if approvals is not None and approvals.file_writes:
            problems.append(
                (
                    "approvals.file_writes",
                    "Codex's patch tool does not pass through its PreToolUse hook, so a "
                    "write could not wait for anyone: leave it False, or use Claude Code",
                )
            )
        writes = [t for t in approvals.tools if t.lower() in WRITE_TOOLS] if approvals is not None else []
        if writes:
            problems.append(("approvals.tools", f"Codex's file tools {writes} do not pass through its hook"))
        refuse(self.name, problems)
        refuse_policy(spec.security_policy, self.name)

    def check_sandbox(self, spec: AgentSpec, binary: str, home: Path) -> None:
        """When the spec needs Codex's own sandbox (``security_policy.deny_network``, or a
        ``permission_mode`` other than ``bypassPermissions``), refuse — naming the field and the fix —
        where that sandbox cannot start (bubblewrap needs user namespaces, which a container's default
        seccomp profile refuses): every shell command of the turn would fail otherwise."""
        fields = [
            *(["security_policy.deny_network"] if spec.security_policy.deny_network else []),
            *(["permission_mode"] if spec.permission_mode != "bypassPermissions" else []),
        ]
        if not fields:
            return
        why = _sandbox_failure(binary, home)
        if why is None:
            return
        raise UsageError(
            f"{' and '.join(fields)} need Codex's sandbox, which cannot start here ({why}), so every "
            "shell command of the turn would fail. Fix: in a container or pod use the spec's "
            "network: none (enforced per uid by the worker) and permission_mode: bypassPermissions "
            "(the container is the sandbox); on a host, allow unprivileged user namespaces"
        )

    def codex_home(self, ctx: TurnContext) -> Path:
        return ctx.home / ".codex"

    def launch(self, ctx: TurnContext) -> LaunchPlan:
        self.check(ctx.spec)
        spec, home = ctx.spec, self.codex_home(ctx)
        ours = home / "harness-run"  # files we write besides config.toml
        files: dict[Path, str] = {}
        settings: dict[str, Any] = {"check_for_update_on_startup": False}
        env = dict(ctx.env)
        base_url = env.get("OPENAI_BASE_URL")
        if base_url:
            provider: dict[str, Any] = {
                "name": PROVIDER,
                "base_url": base_url,
                "env_key": "OPENAI_API_KEY",
                "wire_api": "responses",
            }
            given = env.get(RETRIES_ENV, "")
            retries = int(given) if given.isdigit() else DEFAULT_RETRIES
            provider.update(request_max_retries=retries, stream_max_retries=retries)
            settings["model_provider"] = PROVIDER
            settings[f"model_providers.{PROVIDER}"] = provider  # a table: written after the top-level keys
        elif env.get("OPENAI_API_KEY") and not env.get("CODEX_API_KEY"):
            env["CODEX_API_KEY"] = env["OPENAI_API_KEY"]  # the built-in provider reads only this one
        # tool shells: no model keys, no MCP secrets (their servers get them from Codex itself)
        settings["shell_environment_policy"] = {
            "inherit": "all",
            "ignore_default_excludes": True,
            "exclude": [*_SHELL_EXCLUDES, "HARNESS_RUN_MCP_*"],
        }
        if spec.reasoning_effort is not None:
            settings["model_reasoning_effort"] = spec.reasoning_effort
        if spec.system_prompt.mode == "replace":
            files[ours / "instructions.md"] = spec.system_prompt.text
            settings["model_instructions_file"] = str(ours / "instructions.md")
        elif spec.system_prompt.text:
            settings["developer_instructions"] = spec.system_prompt.text
        if _WEB_SEARCH & set(spec.disallowed_tools):
            settings["web_search"] = "disabled"
        self.check_sandbox(spec, self.locate(ctx.binary), home)
        hook = guard_command(spec.security_policy, env=ctx.env, approvals=spec.approvals)
        files[home / "config.toml"] = codex_files(spec, settings, hook, ctx.env)["config.toml"]

        env["CODEX_HOME"] = str(home)
        schema = strict_schema(spec.output_json_schema) if spec.output_json_schema is not None else None
        # the session's process: the bridge to `codex app-server` (argv, env and files are the same
        # on every turn of the session, so the engine may keep it); the turn is its stdin line
        turn = {
            "prompt": ctx.prompt,
            "thread_id": ctx.native_session_id if ctx.resume else None,
            "model": wire_model(spec.model),
            "cwd": str(ctx.workspace),
            "output_schema": schema,
        }
        argv = [sys.executable, "-I", "-S", str(_BRIDGE), self.locate(ctx.binary)]
        stdin = (json.dumps(turn) + "\n").encode()
        return LaunchPlan(argv=argv, env=env, stdin=stdin, keep_stdin_open=True, files=files)

    def steer(self, text: str) -> bytes | None:
        return None  # the bridge reads its stdin between turns only

    def parser(self, ctx: TurnContext) -> LineParser:
        return _CodexParser(ctx, self)

    def skills_dir(self, workspace: Path, home: Path) -> Path:
        return home / ".codex" / "skills"  # user skills ($CODEX_HOME/skills/<name>/SKILL.md)

    def native_root(self, ctx: TurnContext) -> Path:
        return self.codex_home(ctx)

    def native_files(self, ctx: TurnContext) -> list[Path]:
        # the CODEX_HOME is the session's own: every rollout in it belongs to this session
        return sorted(self.codex_home(ctx).glob("sessions/*/*/*/rollout-*.jsonl"))

    def rollout(self, ctx: TurnContext, thread_id: str | None) -> Path | None:
        """The thread's transcript: ``sessions/YYYY/MM/DD/rollout-<time>-<thread id>.jsonl``."""
        if not thread_id:
            return None
        found = sorted(self.codex_home(ctx).glob(f"sessions/*/*/*/rollout-*-{thread_id}.jsonl"))
        return found[-1] if found else None


_USAGE_KEYS = (
    "input_tokens",
    "cached_input_tokens",
    "cache_write_input_tokens",
    "output_tokens",
    "reasoning_output_tokens",
)


def _counts(raw: Any) -> dict[str, int]:
    raw = as_dict(raw)
    return {k: int(v) if isinstance(v := raw.get(k), int | float) else 0 for k in _USAGE_KEYS}


class _Rollout:
    """The usage of every model response of a thread, read incrementally from its rollout's
    ``token_usage_record`` lines (written per response before its tool calls start, also when the
    turn is stopped afterwards)."""

    def __init__(self, ctx: TurnContext, driver: CodexDriver, thread_id: str | None) -> None:
        self._ctx, self._driver = ctx, driver
        self._path: Path | None = None
        self._offset = 0
        self.records: list[dict[str, int]] = []
        self.refresh(thread_id)

    def refresh(self, thread_id: str | None) -> list[dict[str, int]]:
        if self._path is None:
            self._path = self._driver.rollout(self._ctx, thread_id)
            if self._path is None:
                return self.records
        try:
            with self._path.open("rb") as handle:
                handle.seek(self._offset)
                chunk = handle.read()
        except OSError:
            return self.records
        end = chunk.rfind(b"\n") + 1  # complete lines only: the writer may be mid-line
        self._offset += end
        for raw in chunk[:end].splitlines():
            if b'"token_usage_record"' not in raw:
                continue
            try:
                data = as_dict(json.loads(raw))
            except ValueError:
                continue
            if data.get("type") == "token_usage_record":
                self.records.append(_counts(as_dict(data.get("payload")).get("usage")))
        return self.records


def _usage(records: list[dict[str, int]]) -> Usage:
    """OpenAI counts cached input inside ``input_tokens`` and reasoning inside ``output_tokens``;
    ``Usage`` keeps them apart (as Anthropic does), so the price table counts each token once."""
    d = {k: sum(r[k] for r in records) for k in _USAGE_KEYS}
    return Usage(
        input_tokens=max(0, d["input_tokens"] - d["cached_input_tokens"]),
        cache_read_tokens=d["cached_input_tokens"],
        cache_write_tokens=d["cache_write_input_tokens"],
        output_tokens=max(0, d["output_tokens"] - d["reasoning_output_tokens"]),
        reasoning_tokens=d["reasoning_output_tokens"],
    )


def _error_text(message: Any) -> str:
    """Codex passes a provider's error body through as text: keep its ``error.message``."""
    text = message if isinstance(message, str) else _dumps(message)
    try:
        data = json.loads(text)
    except ValueError:
        return text
    inner = as_dict(as_dict(data).get("error")).get("message")
    return inner if isinstance(inner, str) else text


_SANDBOX_PROBE_S: Final = 30.0
_sandbox_probes: dict[str, str | None] = {}
"""binary -> why its sandbox cannot start here (None: it starts); probed once per process."""


def _sandbox_failure(binary: str, home: Path) -> str | None:
    """Run ``codex sandbox -- true`` once per binary (~50 ms): None when Codex's sandbox starts,
    else the first line of what it said."""
    if binary in _sandbox_probes:
        return _sandbox_probes[binary]
    home.mkdir(parents=True, exist_ok=True)
    try:
        done = subprocess.run(
            [binary, "sandbox", "--", "true"],
            env={
                "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
                "CODEX_HOME": str(home),
                "HOME": str(home.parent),
            },
            capture_output=True,
            text=True,
            timeout=_SANDBOX_PROBE_S,
            check=False,
            stdin=subprocess.DEVNULL,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        failure: str | None = f"`codex sandbox` did not run: {type(exc).__name__}"
    else:
        said = [
            line.strip()
            for line in (done.stderr + done.stdout).splitlines()
            if line.strip() and not line.startswith("WARNING")
        ]
        failure = None if done.returncode == 0 else (said[0] if said else f"exit {done.returncode}")[:300]
    _sandbox_probes[binary] = failure
    return failure


def _explained(message: str) -> str:
    """Codex replaces an HTTP 500's body with its own "high demand" text: say what it means."""
    if _HIGH_DEMAND not in message or "HTTP 500" in message:
        return message
    return (
        f"the model endpoint answered HTTP 500 (Codex does not pass on the server's message; "
        f"it says: {message})"
    )


class _CodexParser(JsonLinesParser):
    def __init__(self, ctx: TurnContext, driver: CodexDriver) -> None:
        super().__init__()
        self._ctx = ctx
        self._driver = driver
        self._thread_id = ctx.native_session_id
        self._rollout = _Rollout(ctx, driver, ctx.native_session_id if ctx.resume else None)
        self._before = len(self._rollout.records)  # model responses of the thread before this turn
        self._limits = TurnLimits(ctx.spec)
        self._open: set[str] = set()  # tool items started, not completed
        self._done: str | None = None  # "completed" | "failed"
        self._error: str | None = None
        self._texts: list[str] = []
        self._tools = 0
        self._started: set[str] = set()

    @property
    def finished(self) -> bool:
        return self._done is not None

    def _event(self, data: dict[str, Any]) -> list[AgentEvent]:
        kind = data.get("type")
        if kind == "thread.started":
            self._thread_id = str(data.get("thread_id") or self._thread_id or "")
            started = StartedEvent(
                harness=CodexDriver.name,
                model=self._ctx.spec.model,
                native_session_id=self._thread_id or None,
                mcp_servers=tuple(McpServerInfo(name=s.name) for s in self._ctx.spec.mcp_servers),
                raw=data,
            )
            events: list[AgentEvent] = [started]
            if rates(self._ctx.spec.model) is None:
                events.append(unknown_cost_event(self._ctx.spec.model, CodexDriver.name))
            return events
        if kind in ("item.started", "item.completed"):
            item = data.get("item")
            return self._item(as_dict(item), kind == "item.completed", data) if isinstance(item, dict) else []
        if kind == "turn.completed":
            self._done = "completed"  # its usage is the thread's total: we sum the rollout's records
            return []
        if kind == "turn.failed":
            self._done = "failed"
            self._error = _explained(
                _error_text(as_dict(data.get("error")).get("message") or self._error or "turn failed")
            )
            return []
        if kind == "error":
            message = _error_text(data.get("message", ""))
            if message.startswith("Reconnecting..."):
                return [_retry(message, data)]
            message = self._error = _explained(message)
            return [ErrorEvent(message=message, raw=data)]
        return []

    def _item(self, item: dict[str, Any], completed: bool, data: dict[str, Any]) -> list[AgentEvent]:
        kind, item_id = item.get("type"), str(item.get("id", ""))
        if kind == "agent_message" and completed:
            text = str(item.get("text", ""))
            self._texts.append(text)
            return [MessageEvent(text=text, message_id=item_id, raw=data)]
        if kind == "reasoning" and completed:
            return [ThinkingEvent(text=str(item.get("text", "")), raw=data)]
        if kind == "error" and completed:  # a warning (config, model metadata …); the turn goes on
            return [WarningEvent(message=str(item.get("message", "")), raw=data)]
        if kind not in _TOOL_ITEMS:
            return []  # todo_list, collab_tool_call …
        events: list[AgentEvent] = []
        if item_id not in self._started:
            self._started.add(item_id)
            self._open.add(item_id)
            self._tools += 1
            name, tool_input = _tool_call(item)
            events.append(ToolUseEvent(tool_use_id=item_id, name=name, input=tool_input, raw=data))
        if completed:
            self._open.discard(item_id)
            content, is_error = _tool_result(item)
            events.append(ToolResultEvent(tool_use_id=item_id, content=content, is_error=is_error, raw=data))
        self._watch_limits()
        return events

    def _turn_records(self) -> list[dict[str, int]]:
        return self._rollout.refresh(self._thread_id)[self._before :]

    def _watch_limits(self) -> None:
        """At each tool item: the budget as soon as a response's usage passes it, ``max_turns``
        once the tools of the N-th response have run (before Codex asks the model again)."""
        if self._stop is not None or (self._limits.budget is None and self._limits.max_turns is None):
            return
        records = self._turn_records()
        self._stop = self._limits.after_response(_usage(records))
        if self._stop is None and not self._open:
            self._stop = self._limits.after_tools(len(records))

    def finish(self, exit_code: int | None, stderr_tail: str) -> RunResult:
        ctx = self._ctx
        records = self._turn_records()
        text = self._texts[-1] if self._texts else ""
        base: dict[str, Any] = {
            "session_id": ctx.session_id,
            "turn": ctx.turn,
            "harness": CodexDriver.name,
            "model": ctx.spec.model,
            "native_session_id": self._thread_id or None,
            "usage": _usage(records),
            "num_turns": len(records) or self._tools + (1 if self._texts else 0),
            "text": text,
        }
        if self._done is None:
            detail = "\n".join(
                line for line in stderr_tail.strip().splitlines() if "Reading additional input" not in line
            )
            detail = self.with_unparsed("codex", self._error or detail)
            error = f"codex exited (code {exit_code}) without finishing the turn: {detail}"
            return RunResult(is_error=True, stop_reason="error", error=error, **base)
        if self._done == "failed":
            return RunResult(is_error=True, stop_reason="error", error=self._error or "turn failed", **base)
        structured: Any = None
        if ctx.spec.output_json_schema is not None:
            try:
                structured = json.loads(text)
            except ValueError:
                error = f"the final answer is not the JSON the output schema asks for: {text[:200]!r}"
                return RunResult(is_error=True, stop_reason="error", error=error, **base)
        return RunResult(structured_output=structured, **base)


def _retry(message: str, data: dict[str, Any]) -> RetryEvent:
    """``Reconnecting... 2/5 (stream disconnected …)``: Codex retries the model request."""
    counts = _RECONNECTING.match(message)
    return RetryEvent(
        message=message,
        attempt=int(counts[1]) if counts else None,
        max_attempts=int(counts[2]) if counts else None,
        raw=data,
    )


def _tool_call(item: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """(name, input) of a tool item: ``shell``, ``mcp__<server>__<tool>``, ``file_change``, ``web_search``."""
    match item.get("type"):
        case "command_execution":
            return "shell", {"command": item.get("command", "")}
        case "mcp_tool_call":
            args = item.get("arguments")
            name = f"mcp__{item.get('server', '')}__{item.get('tool', '')}"
            return name, as_dict(args) if isinstance(args, dict) else {"arguments": args}
        case "file_change":
            return "file_change", {"changes": item.get("changes") or []}
        case kind:
            return str(kind), {k: v for k, v in item.items() if k not in ("id", "type", "status")}


def _tool_result(item: dict[str, Any]) -> tuple[str, bool]:
    failed = item.get("status") == "failed"
    match item.get("type"):
        case "command_execution":
            code = item.get("exit_code")
            return str(item.get("aggregated_output") or ""), failed or code not in (None, 0)
        case "mcp_tool_call" if isinstance(item.get("error"), dict):
            return str(as_dict(item.get("error")).get("message", "")), True
        case "mcp_tool_call":
            blocks = as_dicts(as_dict(item.get("result")).get("content"))
            return "\n".join(str(b.get("text", "")) for b in blocks), failed
        case "file_change":
            changes = as_dicts(item.get("changes"))
            return "\n".join(f"{c.get('kind', '')} {c.get('path', '')}" for c in changes), failed
        case _:
            return str(item.get("query", "")), failed
