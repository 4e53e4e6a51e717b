"""OpenCode driver: ``opencode serve`` behind a bridge that prints what ``opencode run --format json``
prints, one process per session that the engine may keep between turns.

The harness process is ``_opencode_bridge.py`` (standard library only, run by this Python): it
starts ``opencode serve`` on 127.0.0.1 as its child and takes one JSON line per turn on stdin (the
prompt; the ``ses_…`` id to continue, the one every output line carries; the title; the model;
whether to approve asks), then prints ``run``'s lines and a ``done`` line that ends the turn. Its
argv, environment and config files are the same on every turn of a session, so the engine keeps it
(``keeps_process``); a turn it does not keep closes its stdin, and it stops the server.
``opencode run --attach`` is no substitute: it returns before the session's last events.

The binary is the pinned npm package ``opencode-ai`` (``scripts/bootstrap`` installs it into
``<venv>/opt/opencode``). Each session has its own XDG dirs under its home (OpenCode's sessions are
in SQLite under ``$XDG_DATA_HOME/opencode/``) and a generated ``OPENCODE_CONFIG`` (no secret values:
the key is ``{env:OPENAI_API_KEY}``), read by the server at its first request of the session.

Model: with ``OPENAI_BASE_URL`` (given, or OpenRouter routing) a ``harness-run`` provider
(``@ai-sdk/openai-compatible``) gets the spec's model id verbatim (``openai/gpt-5.1`` stays so, as
OpenRouter wants); without it the id is OpenCode's own ``provider/model`` (a bare id gets
``anthropic/`` for ``claude*``, else ``openai/``).

Verified with 1.18.33 against the scripted model: ``instructions: [file]`` appends after OpenCode's
prompt; ``agent.build.prompt`` replaces it (the ``<env>`` block and skill list stay);
``options.reasoningEffort`` → ``reasoning_effort``; a session title skips the title request;
the bridge prints ``reasoning`` lines (as ``run --thinking``); with bypassPermissions it approves
what is not denied (as ``run --auto``), else an ``ask`` is rejected; ``step_finish`` tokens are
split as :class:`Usage` wants; its ``cost`` is 0 for a provider without prices (→ priced from the
table). OpenCode npm-installs ``@opencode-ai/plugin`` into config dirs lacking it: a seeded lock
file makes that a no-op. Skills: ``$XDG_CONFIG_HOME/opencode/skills/``. The agent's ``steps``
option is not used for ``max_turns``: it only adds a "respond with text only" message from the last
step on and keeps the tools. Instead :class:`TurnLimits` enforces ``max_turns`` and
``max_budget_usd`` at each ``step_finish`` (the step's tools have run) by stopping the process
group. Refused before launch (:meth:`OpenCodeDriver.check`): tool entries OpenCode has no name for,
a budget for a model the price table does not know. Ignored as harmless (the ``started`` event lists
it under ``ignored``): ``reasoning_effort`` for a provider that takes none. No steering. 5xx answers
are retried 5 times with a 2-30 s backoff, fixed in 1.18.33: a persistent 5xx takes about a minute
to fail. No native output schema: it goes into the instructions and the final text is parsed as
JSON.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path
from typing import Any, Final

from harness_run.events import (
    AgentEvent,
    ErrorEvent,
    McpServerInfo,
    MessageEvent,
    RunResult,
    StartedEvent,
    ThinkingEvent,
    ToolResultEvent,
    ToolUseEvent,
    Usage,
)
from harness_run.harness._base import JsonLinesParser, LaunchPlan, LineParser, TurnContext, as_dict, refuse
from harness_run.harness._files import opencode_allowed_tools, opencode_files, opencode_unmapped_tools
from harness_run.harness._limits import TurnLimits, budget_problem
from harness_run.harness._locate import BinarySource
from harness_run.harness._policy import opencode_guarded_shell, refuse_policy
from harness_run.harness._sqlite import scrub_sqlite
from harness_run.spec import AgentSpec
from harness_run.vocab.envrules import OPENCODE_PROVIDER_URL, PROVIDER_VARIABLES
from harness_run.vocab.pricing import rates, unknown_cost_event

__all__ = ["OpenCodeDriver"]

_BRIDGE: Final = Path(__file__).with_name("_opencode_bridge.py")
"""Run by the session's Python as the harness process: ``opencode serve`` spoken as ``opencode run``."""

VERSION = "1.18.33"
PROVIDER = "harness-run"
_EFFORT_PROVIDERS = (PROVIDER, "openai")  # take `reasoningEffort` (OpenAI's reasoning_effort)
_FIXED_ENV = {
    "OPENCODE_DISABLE_MODELS_FETCH": "1",
    "OPENCODE_DISABLE_AUTOUPDATE": "1",
    "OPENCODE_DISABLE_LSP_DOWNLOAD": "1",
    "OPENCODE_DISABLE_SHARE": "1",
    "OPENCODE_DISABLE_DEFAULT_PLUGINS": "1",
    "OPENCODE_FAST_BOOT": "1",
    "OPENCODE_EXPERIMENTAL_DISABLE_FILEWATCHER": "1",
}
# OpenCode installs this into every config dir without it, from the npm registry: seed a lock file
_PLUGIN_LOCK = json.dumps({"packages": {"": {"dependencies": {"@opencode-ai/plugin": "*"}}}}) + "\n"
_SCHEMA_NOTE = (
    "When you are done, give your final answer as one JSON value that validates against this JSON "
    "Schema, and nothing else (no prose, no Markdown code fence):\n"
)
_INSTALL_HINT = (
    f"run scripts/bootstrap (installs opencode-ai@{VERSION} into the venv), or "
    f"`npm install -g opencode-ai@{VERSION}`, or set HARNESS_RUN_OPENCODE_BIN"
)


class _NpmSource(BinarySource):
    """The venv-local npm install (``<sys.prefix>/opt/opencode``) takes the wheel's place."""

    def bundled(self) -> str | None:
        path = Path(sys.prefix) / "opt" / "opencode" / "node_modules" / ".bin" / "opencode"
        return str(path) if path.is_file() else None


_SOURCE = _NpmSource(
    label="OpenCode",
    command="opencode",
    env_var="HARNESS_RUN_OPENCODE_BIN",
    package="opencode_ai",
    relative="",
    hint=_INSTALL_HINT,
)


def opencode_model(spec_model: str, endpoint: bool) -> str:
    """OpenCode's ``provider/model`` for a spec model id (see the module docstring)."""
    if spec_model.startswith("openrouter/") and spec_model.count("/") >= 2:
        spec_model = spec_model.removeprefix("openrouter/")  # OpenRouter's own id: vendor/model
    if endpoint:
        return f"{PROVIDER}/{spec_model}"
    if "/" in spec_model:
        return spec_model
    return f"{'anthropic' if spec_model.startswith('claude') else 'openai'}/{spec_model}"


class OpenCodeDriver:
    name = "opencode"
    steering = False
    keeps_process = True

    def locate(self, override: str | None = None) -> str:
        return _SOURCE.locate(override)

    def check(self, spec: AgentSpec) -> None:
        """Refuse what OpenCode cannot honour (see the module docstring), naming each field."""
        unmapped = opencode_unmapped_tools(spec)
        problems: list[tuple[str, str]] = []
        for field, why in (
            ("allowed_tools", "OpenCode can only pre-approve its permission keys and MCP tools"),
            ("disallowed_tools", "OpenCode can only disable tools by plain name (no patterns)"),
        ):
            names = [u.split(":", 1)[1] for u in unmapped if u.startswith(f"{field}:")]
            if names:
                problems.append((field, f"{why}, not {names}"))
        budget = budget_problem(spec, self.name)
        if budget is not None:
            problems.append(budget)
        approvals = spec.approvals
        if approvals is not None and approvals.tools:
            problems.append(
                (
                    "approvals.tools",
                    "only shell commands can wait for a person on OpenCode (its guarded "
                    "shell): use approvals.commands, or another harness",
                )
            )
        if approvals is not None and approvals.file_writes:
            problems.append(
                (
                    "approvals.file_writes",
                    "OpenCode's own write and edit tools do not pass through the "
                    "guard: leave it False, deny those tools, or use Claude Code or Codex",
                )
            )
        refuse(self.name, problems)
        refuse_policy(spec.security_policy, self.name)

    def xdg(self, home: Path) -> dict[str, Path]:
        return {
            "XDG_CONFIG_HOME": home / ".config",
            "XDG_DATA_HOME": home / ".local" / "share",
            "XDG_CACHE_HOME": home / ".cache",
            "XDG_STATE_HOME": home / ".local" / "state",
        }

    def launch(self, ctx: TurnContext) -> LaunchPlan:
        self.check(ctx.spec)
        spec, env = ctx.spec, dict(ctx.env)
        ours = ctx.home / "harness-run"  # files we write besides OpenCode's own dirs
        config_dir = self.xdg(ctx.home)["XDG_CONFIG_HOME"] / "opencode"
        base_url = env.get("OPENAI_BASE_URL")
        model = opencode_model(spec.model, bool(base_url))
        provider_id, model_id = model.split("/", 1)
        settings: dict[str, Any] = {"model": model, "permission": opencode_allowed_tools(spec)}
        model_entry: dict[str, Any] = {"name": model_id}
        if spec.reasoning_effort is not None and provider_id in _EFFORT_PROVIDERS:
            model_entry["options"] = {"reasoningEffort": spec.reasoning_effort}
        if base_url:
            options = {"baseURL": base_url, "apiKey": "{env:OPENAI_API_KEY}"}
            settings["provider"] = {
                PROVIDER: {
                    "npm": "@ai-sdk/openai-compatible",
                    "name": PROVIDER,
                    "options": options,
                    "models": {model_id: model_entry},
                }
            }
        else:
            entry: dict[str, Any] = {}
            proxied = env.get(OPENCODE_PROVIDER_URL.get(provider_id, ""))
            if proxied:  # a built-in provider whose key the model proxy holds
                entry["options"] = {"baseURL": proxied}
            if "options" in model_entry:
                entry["models"] = {model_id: model_entry}
            if entry:
                settings["provider"] = {provider_id: entry}
        files: dict[Path, str] = {
            config_dir / "package-lock.json": _PLUGIN_LOCK,
            config_dir / "node_modules" / ".harness-run": "",
        }
        notes: list[str] = []
        if spec.system_prompt.mode == "inherit" and spec.system_prompt.text:
            notes.append(spec.system_prompt.text)
        if spec.output_json_schema is not None:
            notes.append(_SCHEMA_NOTE + json.dumps(spec.output_json_schema, sort_keys=True))
        if notes:
            files[ours / "instructions.md"] = "\n\n".join(notes) + "\n"
            settings["instructions"] = [str(ours / "instructions.md")]
        agent: dict[str, Any] = {}
        if spec.system_prompt.mode == "replace":
            agent["prompt"] = spec.system_prompt.text
        if agent:
            settings["agent"] = {"build": agent}
        guarded = opencode_guarded_shell(
            spec.security_policy,
            shutil.which("bash", path=env.get("PATH")) or "/bin/sh",
            ctx.env,
            spec.approvals,
        )
        if guarded is not None:  # the guard before every command of the bash tool (fail closed)
            files[ours / "shell" / "bash"] = guarded
            settings["shell"] = str(ours / "shell" / "bash")
        files[ours / "opencode.json"] = opencode_files(spec, settings, ctx.env)["opencode.json"]

        # the session's process: the bridge to `opencode serve` (argv, env and files are the same on
        # every turn of the session, so the engine may keep it); the turn is its stdin line
        turn = {
            "prompt": ctx.prompt,
            "session": ctx.native_session_id if ctx.resume else None,
            "title": f"harness-run {ctx.session_id}",  # a title given: no title-generation request
            "model": model,
            # approve what is not denied; else an `ask` is rejected (nobody answers it headless)
            "auto": spec.permission_mode == "bypassPermissions",
        }
        argv = [sys.executable, "-I", "-S", str(_BRIDGE), self.locate(ctx.binary)]
        env.update(_FIXED_ENV)
        env.update({k: str(v) for k, v in self.xdg(ctx.home).items()})
        env["OPENCODE_CONFIG"] = str(ours / "opencode.json")
        stdin = (json.dumps(turn) + "\n").encode()
        return LaunchPlan(argv=argv, env=env, stdin=stdin, keep_stdin_open=True, files=files)

    def steer(self, text: str) -> bytes | None:
        return None  # the bridge takes a turn's prompt once

    def parser(self, ctx: TurnContext) -> LineParser:
        return _OpenCodeParser(ctx, self.ignored(ctx))

    def skills_dir(self, workspace: Path, home: Path) -> Path:
        return self.xdg(home)["XDG_CONFIG_HOME"] / "opencode" / "skills"  # global skills

    def native_root(self, ctx: TurnContext) -> Path:
        return self.xdg(ctx.home)["XDG_DATA_HOME"] / "opencode"

    def native_files(self, ctx: TurnContext) -> list[Path]:
        """``opencode.db`` (+ its WAL). With ``checkpoint``, the WAL is folded in and the run's secret
        values are scrubbed in SQL first: the checkpoint redacts files byte-wise, which would break
        a SQLite file; the agent's own history then shows ``***`` too, as a restored one would."""
        db = self.native_root(ctx) / "opencode.db"
        if not db.is_file():
            return []
        if ctx.spec.checkpoint:
            forms = _secret_forms(ctx)
            if not scrub_sqlite(db, forms):
                return []  # never hand over a file the byte-wise redaction would corrupt
        wal = db.with_name("opencode.db-wal")  # -shm is rebuilt by SQLite
        return [db, *([wal] if wal.is_file() and wal.stat().st_size else [])]

    def ignored(self, ctx: TurnContext) -> list[str]:
        """Harmless settings this turn cannot apply (listed in the ``started`` event)."""
        spec = ctx.spec
        provider = opencode_model(spec.model, bool(ctx.env.get("OPENAI_BASE_URL"))).split("/")[0]
        return (
            ["reasoning_effort"]
            if spec.reasoning_effort is not None and provider not in _EFFORT_PROVIDERS
            else []
        )


def _secret_forms(ctx: TurnContext) -> list[str]:
    """What the checkpoint redacts (the run's secrets), as found in the turn's environment: values of
    declared secrets, provider variables (not endpoints) and MCP secret variables, plain and
    JSON-escaped, at least 4 characters, longest first."""
    names = set(ctx.spec.secret_names) | PROVIDER_VARIABLES
    values = [
        v
        for k, v in ctx.env.items()
        if (k in names or k.startswith("HARNESS_RUN_MCP_")) and not k.endswith("_BASE_URL")
    ]
    forms = {f for v in values for f in (v, json.dumps(v)[1:-1]) if len(f) >= 4}
    return sorted(forms, key=len, reverse=True)


def _tokens(part: dict[str, Any]) -> Usage:
    raw = as_dict(part.get("tokens"))
    cache = as_dict(raw.get("cache"))

    def num(source: dict[str, Any], key: str) -> int:
        value = source.get(key)
        return int(value) if isinstance(value, int | float) else 0

    return Usage(
        input_tokens=num(raw, "input"),
        output_tokens=num(raw, "output"),
        reasoning_tokens=num(raw, "reasoning"),
        cache_read_tokens=num(cache, "read"),
        cache_write_tokens=num(cache, "write"),
    )


def _error_text(error: dict[str, Any]) -> str:
    data = as_dict(error.get("data"))
    message = str(data.get("message") or error.get("name") or "unknown error")
    status = data.get("statusCode")
    return f"{message} (HTTP {status})" if isinstance(status, int) else message


def _json_answer(text: str) -> Any:
    body = text.strip()
    if body.startswith("```"):  # a fenced answer despite the instruction
        body = body.split("\n", 1)[-1].rsplit("```", 1)[0]
    return json.loads(body)


class _OpenCodeParser(JsonLinesParser):
    def __init__(self, ctx: TurnContext, ignored: list[str]) -> None:
        super().__init__()
        self._ctx = ctx
        self._ignored = ignored
        self._limits = TurnLimits(ctx.spec)
        self._priced = rates(ctx.spec.model) is not None
        self._session_id = ctx.native_session_id
        self._started = False
        self._done = False
        self._errors: list[str] = []
        self._usage = Usage()
        self._cost = 0.0
        self._steps = 0
        self._step_texts: list[str] = []
        self._texts: list[str] = []  # of the last step that said something
        self._mcp = [s.name for s in ctx.spec.mcp_servers]

    @property
    def finished(self) -> bool:
        return self._done

    def _event(self, data: dict[str, Any]) -> list[AgentEvent]:
        events: list[AgentEvent] = []
        if isinstance(data.get("sessionID"), str):
            self._session_id = data["sessionID"]
            if not self._started:
                self._started = True
                started = StartedEvent(
                    harness=OpenCodeDriver.name,
                    model=self._ctx.spec.model,
                    native_session_id=self._session_id,
                    mcp_servers=tuple(McpServerInfo(name=name) for name in self._mcp),
                    ignored=tuple(self._ignored),
                    raw=data,
                )
                events.append(started)
        kind, part = data.get("type"), as_dict(data.get("part"))
        if kind == "step_start":
            self._step_texts = []
        elif kind == "text":
            text = str(part.get("text", ""))
            self._step_texts.append(text)
            events.append(MessageEvent(text=text, message_id=part.get("messageID"), raw=data))
        elif kind == "reasoning":
            events.append(ThinkingEvent(text=str(part.get("text", "")), raw=data))
        elif kind == "tool_use" and part.get("tool"):
            events += self._tool(part, data)
        elif kind == "step_finish":
            self._steps += 1
            self._usage += _tokens(part)
            cost = part.get("cost")
            self._cost += float(cost) if isinstance(cost, int | float) else 0.0
            if self._step_texts:
                self._texts = self._step_texts
            if not self._cost and not self._priced:
                self._priced = True  # say it once
                events.append(unknown_cost_event(self._ctx.spec.model, OpenCodeDriver.name))
            if part.get("reason") != "stop" and self._stop is None:
                self._stop = self._limits.after_response(self._usage, self._cost) or (
                    self._limits.after_tools(self._steps) if part.get("reason") == "tool-calls" else None
                )
        elif kind == "error":
            message = _error_text(as_dict(data.get("error")))
            self._errors.append(message)
            events.append(ErrorEvent(message=message, raw=data))
        elif kind == "done":  # the bridge's last line of the turn: the session is idle
            self._done = True
        return events

    def _tool(self, part: dict[str, Any], data: dict[str, Any]) -> list[AgentEvent]:
        state, call_id = as_dict(part.get("state")), str(part.get("callID") or part.get("id") or "")
        name = str(part.get("tool", ""))
        server = next((s for s in self._mcp if name.startswith(f"{s}_")), None)
        if server is not None:  # OpenCode names MCP tools <server>_<tool>
            name = f"mcp__{server}__{name.removeprefix(f'{server}_')}"
        failed = state.get("status") == "error"
        exit_code = as_dict(state.get("metadata")).get("exit")
        content = str(state.get("error") if failed else state.get("output") or "")
        return [
            ToolUseEvent(tool_use_id=call_id, name=name, input=as_dict(state.get("input")), raw=data),
            ToolResultEvent(
                tool_use_id=call_id, content=content, is_error=failed or exit_code not in (None, 0), raw=data
            ),
        ]

    def finish(self, exit_code: int | None, stderr_tail: str) -> RunResult:
        ctx = self._ctx
        text = "\n".join(self._texts or self._step_texts)
        base: dict[str, Any] = {
            "session_id": ctx.session_id,
            "turn": ctx.turn,
            "harness": OpenCodeDriver.name,
            "model": ctx.spec.model,
            "native_session_id": self._session_id or None,
            "usage": self._usage,
            "num_turns": self._steps,
            "cost_usd": self._cost or None,  # 0: a provider without prices, not a free turn
            "text": text,
        }
        if self._errors:
            return RunResult(is_error=True, stop_reason="error", error="\n".join(self._errors), **base)
        if not self._done:  # the bridge's `done` line never came
            detail = self.with_unparsed("opencode", stderr_tail.strip())
            error = f"opencode exited (code {exit_code}) without finishing the turn: {detail}"
            return RunResult(is_error=True, stop_reason="error", error=error, **base)
        structured: Any = None
        if ctx.spec.output_json_schema is not None:
            try:
                structured = _json_answer(text)
            except ValueError:
                error = f"the final answer is not the JSON the output schema asks for: {text[:200]!r}"
                return RunResult(is_error=True, stop_reason="error", error=error, **base)
        return RunResult(structured_output=structured, **base)
