"""Claude Code driver: the ``claude`` CLI's headless stream-json protocol, spoken directly.

We do not import ``claude-agent-sdk`` (its import alone costs ~0.5 s, as long as a scripted turn);
we only use the ``claude`` binary its wheel bundles, located without importing the package.
See docs/decisions/0004-drive-the-cli-not-the-sdk.md.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, cast

from harness_run.events import (
    AgentEvent,
    DeltaEvent,
    ErrorEvent,
    McpServerInfo,
    MessageEvent,
    RetryEvent,
    RunResult,
    StartedEvent,
    StopReason,
    ThinkingEvent,
    ToolResultEvent,
    ToolUseEvent,
    Usage,
)
from harness_run.harness._base import (
    JsonLinesParser,
    LaunchPlan,
    LineParser,
    TurnContext,
    as_dict,
    as_dicts,
    as_strs,
    opt_int,
    opt_str,
)
from harness_run.harness._files import claude_files
from harness_run.harness._locate import BinarySource
from harness_run.harness._policy import guard_command, refuse_policy
from harness_run.spec import AgentSpec

__all__ = ["ClaudeCodeDriver"]

_EFFORT = {"minimal": "low", "low": "low", "medium": "medium", "high": "high", "xhigh": "xhigh"}
_STOP: dict[str, StopReason] = {
    "success": "completed",
    "error_max_turns": "max_turns",
    "error_max_budget_usd": "max_budget",
    "error_during_execution": "error",
}
# Always set for the CLI: no traffic to the vendor besides the model endpoint, no auto-update.
_FIXED_ENV = {
    "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
    "DISABLE_AUTOUPDATER": "1",
    "DISABLE_TELEMETRY": "1",
    "DISABLE_ERROR_REPORTING": "1",
    "CLAUDE_CODE_ENTRYPOINT": "sdk-py",
}
# Defaults the spec's ``env`` can override: Claude Code retries a failed model request 10 times with
# a backoff up to ~30 s (a dropped stream held a turn ~3 min); 2 retries end it in a few seconds.
DEFAULT_ENV = {"CLAUDE_CODE_MAX_RETRIES": "2"}
_INSTALL_HINT = (
    'install it with `pip install "harness-run[local]"` (the claude-agent-sdk wheel bundles the '
    "binary), or `npm install -g @anthropic-ai/claude-code`, or set HARNESS_RUN_CLAUDE_BIN"
)


def project_dir_name(cwd: Path) -> str:
    """How Claude Code names a working directory under ``$CLAUDE_CONFIG_DIR/projects``."""
    return re.sub(r"[^A-Za-z0-9]", "-", str(cwd))


_SOURCE = BinarySource(
    label="Claude Code",
    command="claude",
    env_var="HARNESS_RUN_CLAUDE_BIN",
    package="claude_agent_sdk",
    relative="_bundled/claude",
    hint=_INSTALL_HINT,
)


class ClaudeCodeDriver:
    name = "claude-code"
    steering = True
    keeps_process = True

    def locate(self, override: str | None = None) -> str:
        return _SOURCE.locate(override)

    def check(self, spec: AgentSpec) -> None:
        """Claude Code honours every spec field (tools, limits, budget, effort, schema) natively;
        of the security policy, ``deny_network`` is refused (no sandbox cuts its tools' network)."""
        refuse_policy(spec.security_policy, self.name)

    def config_dir(self, ctx: TurnContext) -> Path:
        return ctx.home / ".claude"

    def launch(self, ctx: TurnContext) -> LaunchPlan:
        spec = ctx.spec
        self.check(spec)
        argv = [
            self.locate(ctx.binary),
            "-p",
            "--input-format",
            "stream-json",
            "--output-format",
            "stream-json",
            "--verbose",
            "--include-partial-messages",  # stream_event lines: the text deltas as the model streams
            "--model",
            spec.model,
            "--permission-mode",
            spec.permission_mode,
            "--permission-prompts",
            "none",
            "--setting-sources",
            "project,local",
        ]
        argv += ["--resume", ctx.session_id] if ctx.resume else ["--session-id", ctx.session_id]
        if spec.system_prompt.mode == "replace":
            argv += ["--system-prompt", spec.system_prompt.text]
        elif spec.system_prompt.text:
            argv += ["--append-system-prompt", spec.system_prompt.text]
        if ctx.prompt_overridden:
            argv += ["--system-prompt-snapshot", "off"]
        if spec.allowed_tools:
            argv += ["--allowedTools", ",".join(spec.allowed_tools)]
        if spec.disallowed_tools:
            argv += ["--disallowedTools", ",".join(spec.disallowed_tools)]
        if spec.max_turns is not None:
            argv += ["--max-turns", str(spec.max_turns)]
        if spec.max_budget_usd is not None:
            argv += ["--max-budget-usd", f"{spec.max_budget_usd:g}"]
        if spec.reasoning_effort is not None:
            argv += ["--effort", _EFFORT[spec.reasoning_effort]]
        schema = spec.output_json_schema
        if schema is not None:
            argv += ["--json-schema", json.dumps(schema, sort_keys=True, separators=(",", ":"))]
        files: dict[Path, str] = {}
        hook = guard_command(spec.security_policy, env=ctx.env, approvals=spec.approvals)
        for rel, text in claude_files(spec, hook, ctx.env).items():
            path = ctx.home / "harness-run" / rel
            files[path] = text
            if rel.endswith("mcp.json"):
                argv += ["--mcp-config", str(path), "--strict-mcp-config"]
            elif rel.endswith("settings.json"):
                argv += ["--settings", str(path)]
        env = {**DEFAULT_ENV, **ctx.env, **_FIXED_ENV}
        env["CLAUDE_CONFIG_DIR"] = str(self.config_dir(ctx))
        if spec.permission_mode == "bypassPermissions":
            env["IS_SANDBOX"] = "1"  # root refuses bypass without it; we run in an isolated workspace
        message = {
            "type": "user",
            "message": {"role": "user", "content": ctx.prompt},
            "parent_tool_use_id": None,
            "session_id": ctx.session_id,
        }
        return LaunchPlan(
            argv=argv, env=env, stdin=(json.dumps(message) + "\n").encode(), keep_stdin_open=True, files=files
        )

    def steer(self, text: str) -> bytes | None:
        message = {"type": "user", "message": {"role": "user", "content": text}, "parent_tool_use_id": None}
        return (json.dumps(message) + "\n").encode()

    def parser(self, ctx: TurnContext) -> LineParser:
        return _ClaudeParser(ctx)

    def skills_dir(self, workspace: Path, home: Path) -> Path:
        return workspace / ".claude" / "skills"  # project skills

    def native_root(self, ctx: TurnContext) -> Path:
        # Claude Code finds a transcript only under the directory named after the cwd
        return self.config_dir(ctx) / "projects" / project_dir_name(ctx.workspace)

    def native_files(self, ctx: TurnContext) -> list[Path]:
        transcript = self.native_root(ctx) / f"{ctx.session_id}.jsonl"
        return [transcript] if transcript.is_file() else []


def _text_of(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = [str(item.get("text", "")) for item in as_dicts(content)]
        return "\n".join(p for p in parts if p)
    return "" if content is None else json.dumps(content)


def _model_usage(raw: Any) -> Usage:
    """The result's ``modelUsage`` (per model, camelCase) summed: Claude Code leaves ``usage`` at 0
    when it stops a turn for its budget, but still counts here."""
    total = Usage()
    for entry in as_dict(raw).values():
        entry = as_dict(entry)
        total += _usage(
            {
                "input_tokens": entry.get("inputTokens"),
                "output_tokens": entry.get("outputTokens"),
                "cache_read_input_tokens": entry.get("cacheReadInputTokens"),
                "cache_creation_input_tokens": entry.get("cacheCreationInputTokens"),
            }
        )
    return total


def _started(data: dict[str, Any], ctx: TurnContext) -> StartedEvent:
    """The ``system``/``init`` line: what the CLI runs with."""
    return StartedEvent(
        harness=ClaudeCodeDriver.name,
        model=opt_str(data.get("model")) or ctx.spec.model,
        native_session_id=opt_str(data.get("session_id")) or ctx.session_id,
        tools=_names(data.get("tools")),
        mcp_servers=tuple(
            McpServerInfo(name=str(s.get("name", "")), status=opt_str(s.get("status")))
            for s in as_dicts(data.get("mcp_servers"))
        ),
        skills=_names(data.get("skills")),
        harness_version=opt_str(data.get("claude_code_version")),
        permission_mode=opt_str(data.get("permissionMode")),
        raw=data,
    )


def _names(value: Any) -> tuple[str, ...] | None:
    return tuple(as_strs(value)) if isinstance(value, list) else None


def _retry(data: dict[str, Any]) -> RetryEvent:
    """The ``system``/``api_retry`` line: a failed model request that the CLI retries."""
    attempt, limit = opt_int(data.get("attempt")), opt_int(data.get("max_retries"))
    status = opt_int(data.get("error_status"))
    delay = data.get("retry_delay_ms")
    delay_s = delay / 1000 if isinstance(delay, int | float) and not isinstance(delay, bool) else None
    what = str(data.get("error") or "request failed") + (f", HTTP {status}" if status else "")
    when = f" in {delay_s:.1f} s" if delay_s is not None else ""
    of = f" of {limit}" if limit is not None else ""
    return RetryEvent(
        message=f"the model API failed ({what}); retry {attempt or '?'}{of}{when}",
        attempt=attempt,
        max_attempts=limit,
        delay_s=delay_s,
        http_status=status,
        raw=data,
    )


def _usage(raw: dict[str, Any] | None) -> Usage:
    raw = raw or {}

    def num(key: str) -> int:
        value = raw.get(key)
        return int(value) if isinstance(value, int | float) else 0

    return Usage(
        input_tokens=num("input_tokens"),
        output_tokens=num("output_tokens"),
        cache_read_tokens=num("cache_read_input_tokens"),
        cache_write_tokens=num("cache_creation_input_tokens"),
    )


class _ClaudeParser(JsonLinesParser):
    def __init__(self, ctx: TurnContext) -> None:
        super().__init__()
        self._ctx = ctx
        self._result: dict[str, Any] | None = None
        self._texts: list[str] = []
        self._streaming: str | None = None
        """The id of the model response being streamed (its ``message_start``)."""
        self._message_usage: dict[str, Usage] = {}
        """Usage per model call (message id), so a turn stopped before its result keeps its accounting."""

    @property
    def finished(self) -> bool:
        return self._result is not None

    def _event(self, data: dict[str, Any]) -> list[AgentEvent]:
        kind = data.get("type")
        if kind == "assistant":
            return self._assistant(data)
        if kind == "user":
            return self._user(data)
        if kind == "stream_event":
            return self._stream_event(data)
        if kind == "result":
            self._result = data
            return []
        if kind == "system" and data.get("subtype") == "init":
            return [_started(data, self._ctx)]
        if kind == "system" and data.get("subtype") == "api_retry":
            return [_retry(data)]
        return []

    def _assistant(self, data: dict[str, Any]) -> list[AgentEvent]:
        message = as_dict(data.get("message"))
        message_id = opt_str(message.get("id"))
        if message_id is not None and isinstance(message.get("usage"), dict):
            self._message_usage[message_id] = _usage(as_dict(message.get("usage")))
        events: list[AgentEvent] = []
        for block in as_dicts(message.get("content")):
            btype = block.get("type")
            if btype == "text":
                text = str(block.get("text", ""))
                self._texts.append(text)
                events.append(MessageEvent(text=text, message_id=message_id, raw=data))
            elif btype == "thinking":
                events.append(ThinkingEvent(text=str(block.get("thinking", "")), raw=data))
            elif btype == "tool_use":
                events.append(
                    ToolUseEvent(
                        tool_use_id=str(block.get("id", "")),
                        name=str(block.get("name", "")),
                        input=as_dict(block.get("input")),
                        raw=data,
                    )
                )
        if data.get("error"):
            events.append(
                ErrorEvent(message=_text_of(message.get("content")) or str(data["error"]), raw=data)
            )
        return events

    def _stream_event(self, data: dict[str, Any]) -> list[AgentEvent]:
        """``--include-partial-messages``: the model's raw stream; its text deltas become
        :class:`DeltaEvent` s (live only), everything else is in the whole ``assistant`` line."""
        event = as_dict(data.get("event"))
        if event.get("type") == "message_start":
            self._streaming = opt_str(as_dict(event.get("message")).get("id"))
            return []
        delta = as_dict(event.get("delta"))
        if event.get("type") != "content_block_delta" or delta.get("type") != "text_delta":
            return []
        text = delta.get("text")
        if not isinstance(text, str) or not text:
            return []
        return [DeltaEvent(text=text, message_id=opt_str(data.get("api_message_id")) or self._streaming)]

    def _user(self, data: dict[str, Any]) -> list[AgentEvent]:
        content = as_dict(data.get("message")).get("content")
        return [
            ToolResultEvent(
                tool_use_id=str(block.get("tool_use_id", "")),
                content=_text_of(block.get("content")),
                is_error=bool(block.get("is_error")),
                raw=data,
            )
            for block in as_dicts(content)
            if block.get("type") == "tool_result"
        ]

    def finish(self, exit_code: int | None, stderr_tail: str) -> RunResult:
        ctx = self._ctx
        base: dict[str, Any] = {
            "session_id": ctx.session_id,
            "turn": ctx.turn,
            "harness": ClaudeCodeDriver.name,
            "model": ctx.spec.model,
            "native_session_id": ctx.session_id,
        }
        data = self._result
        if data is None:
            detail = self.with_unparsed("claude", stderr_tail.strip())
            usage = sum(self._message_usage.values(), Usage())
            return RunResult(
                text="\n".join(self._texts),
                is_error=True,
                stop_reason="error",
                error=f"claude exited (code {exit_code}) without a result: {detail}",
                num_turns=len(self._message_usage),
                usage=usage,
                **base,
            )
        is_error = bool(data.get("is_error"))
        subtype = str(data.get("subtype", "success"))
        stop: StopReason = _STOP.get(subtype, "error")
        if is_error and stop == "completed":
            stop = "error"
        text = data.get("result")
        text = text if isinstance(text, str) else "\n".join(self._texts)
        errors = data.get("errors")
        error = None
        if is_error or stop != "completed":
            error = text or (
                " ".join(map(str, cast(list[Any], errors))) if isinstance(errors, list) else subtype
            )
        cost = data.get("total_cost_usd")
        usage = _usage(data.get("usage"))
        if usage.total_tokens == 0:  # a budget stop: the totals are only in modelUsage (or per message)
            usage = _model_usage(data.get("modelUsage"))
            if usage.total_tokens == 0:
                usage = sum(self._message_usage.values(), Usage())
        # model responses, as on every harness (the CLI counts a max_turns stop's refused call too)
        turns = len(self._message_usage) or int(data.get("num_turns") or 0)
        return RunResult(
            text=text,
            structured_output=data.get("structured_output"),
            is_error=is_error or stop == "error",
            error=error,
            stop_reason=stop,
            num_turns=turns,
            cost_usd=float(cost) if isinstance(cost, int | float) else None,
            usage=usage,
            duration_s=float(data.get("duration_ms") or 0) / 1000,
            **base,
        )
