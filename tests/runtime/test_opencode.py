"""The real OpenCode CLI (opencode-ai, npm-installed into the venv by scripts/bootstrap) against the
scripted model: a shell turn, history across turns and engines, errors, structured output,
instructions, MCP, skills and secrets — plus the driver's pure parts (argv, config, parsing, locate).

OpenCode turns take seconds (a 185 MB binary booting), so the real-binary tests run few turns.
"""

from __future__ import annotations

import json
import shutil
import sqlite3
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from harness_run import local
from harness_run.errors import HarnessNotFoundError, UsageError
from harness_run.events import (
    CostUnknownEvent,
    ErrorEvent,
    StartedEvent,
    ThinkingEvent,
    ToolResultEvent,
    ToolUseEvent,
)
from harness_run.harness import TurnContext, get_driver
from harness_run.harness import opencode as opencode_driver
from harness_run.harness.opencode import OpenCodeDriver, opencode_model
from harness_run.spec import McpServer, SessionConfig, SkillSource, SystemPrompt
from harness_run.testing import ScriptedModel, Usage, error, shell, structured, text, tool_call
from harness_run.vocab.pricing import price

from ._helpers import API_KEY, turn_context, workspace_of
from .conftest import EngineFactory
from .test_secrets import store_contents

MODEL = "openai/gpt-5.1"
BRIDGE = Path(opencode_driver.__file__).with_name("_opencode_bridge.py")
USAGE_KEYS = {"input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens", "reasoning_tokens"}
SERVER = Path(__file__).with_name("mcp_marker_server.py")
harness = pytest.mark.harness


def secrets_for(model: ScriptedModel, **extra: str) -> dict[str, str]:
    return {"OPENAI_BASE_URL": model.openai_url, "OPENAI_API_KEY": API_KEY, **extra}


def opencode(make_engine: EngineFactory, **fields: Any) -> local.LocalEngine:
    fields.setdefault("name", "oc-agent")
    return make_engine(harness="opencode", model=MODEL, **fields)


# --- the real binary ----------------------------------------------------------------------------


@harness
async def test_a_shell_turn_then_send_carries_the_history(
    model: ScriptedModel, make_engine: EngineFactory
) -> None:
    first = Usage(input_tokens=100, output_tokens=7, cache_read_tokens=5, reasoning_tokens=2)
    model.add(
        shell("printf 'def fibonacci(n): ...' > fib.py && echo created", usage=first, thinking="plan it"),
        text("Created fib.py.", usage={"input_tokens": 200, "output_tokens": 9}),
        text("answer two charlie"),
    )
    engine = opencode(
        make_engine, reasoning_effort="high", system_prompt=SystemPrompt.inherit(append="APPEND-MARK-5521")
    )
    session = engine.start_session()
    run = session.run("Create fib.py", secrets=secrets_for(model))
    result = await run

    assert not result.is_error, result.error
    assert (workspace_of(engine, session.session_id) / "fib.py").read_text() == "def fibonacci(n): ..."
    assert (result.text, result.stop_reason, result.harness, result.model) == (
        "Created fib.py.",
        "completed",
        "opencode",
        MODEL,
    )
    assert result.num_turns == 2  # two model steps
    assert set(result.usage.model_dump()) == USAGE_KEYS
    assert result.usage.model_dump() == {  # OpenCode already splits cache and reasoning out
        "input_tokens": 300,
        "output_tokens": 14,
        "cache_read_tokens": 5,
        "cache_write_tokens": 0,
        "reasoning_tokens": 2,
    }
    # OpenCode's cost is 0 for a provider without prices: unknown, so priced from the table
    assert result.cost_usd == price(MODEL, result.usage) and result.cost_usd
    assert (result.native_session_id or "").startswith("ses_")

    types = [e.type for e in run.events]
    assert (types[0], types[1], types[-1]) == ("user", "started", "result")
    assert (
        types.index("thinking")
        < types.index("tool_use")
        < types.index("tool_result")
        < types.index("message")
    )
    [use] = [e for e in run.events if isinstance(e, ToolUseEvent)]
    [tool_result] = [e for e in run.events if isinstance(e, ToolResultEvent)]
    assert (use.name, use.input["command"]) == (
        "bash",
        "printf 'def fibonacci(n): ...' > fib.py && echo created",
    )
    assert (tool_result.tool_use_id, tool_result.content, tool_result.is_error) == (
        use.tool_use_id,
        "created\n",
        False,
    )
    assert [e.text for e in run.events if isinstance(e, ThinkingEvent)] == ["plan it"]
    started = next(e for e in run.events if isinstance(e, StartedEvent))
    assert started.native_session_id == result.native_session_id

    assert model.side_requests == []  # --title: no title-generation request
    request = model.main_requests[0]
    assert (request.path, request.model, request.json["reasoning_effort"]) == (
        "/v1/chat/completions",
        MODEL,
        "high",
    )
    system = request.system_text
    assert system.startswith("You are OpenCode")  # inherit: OpenCode's prompt stays first …
    assert system.index("You are OpenCode") < system.index("APPEND-MARK-5521")  # … the text follows
    assert "created" in model.main_requests[1].tool_results[0]

    big = "-second prompt delta " + "x" * 200_000  # a leading dash and over the 128 KiB argv limit
    two = await session.send(big, secrets=secrets_for(model))
    assert (two.is_error, two.text, two.native_session_id) == (
        False,
        "answer two charlie",
        result.native_session_id,
    )
    last = model.main_requests[-1]
    assert last.user_texts[0] == "Create fib.py"
    assert last.last_user_text == big
    assert "Created fib.py." in last.text
    assert [t.turn for t in session.history()] == [1, 2]


@harness
async def test_a_new_engine_reattaches_from_the_checkpoint_and_no_secret_is_stored(
    model: ScriptedModel, make_engine: EngineFactory, workdir: Path
) -> None:
    canary = f"canary-{uuid.uuid4().hex}"
    key = f"sk-canary-{uuid.uuid4().hex}"
    model.add(
        shell('echo "$CANARY_SECRET" > canary.txt; echo "key=$CANARY_SECRET"'),
        text(f"turn one answer, the secret was {canary}"),
        text("turn two answer"),
    )
    engine = opencode(make_engine, checkpoint=True, secrets=["CANARY_SECRET"])
    session = engine.start_session()
    secrets = {**secrets_for(model), "OPENAI_API_KEY": key, "CANARY_SECRET": canary}
    run = session.run("first prompt alpha", secrets=secrets)
    one = await run
    assert not one.is_error, one.error
    sid = session.session_id
    assert (workspace_of(engine, sid) / "canary.txt").read_text().strip() == canary
    assert any(canary in r for r in model.main_requests[1].tool_results)  # the agent had it

    shutil.rmtree(workdir / "sessions" / sid / "home")  # OpenCode's database is gone
    shutil.rmtree(workdir / "sessions" / sid / "workspace")
    other = local.get_engine("oc-agent", workdir=workdir)
    try:
        two = await other.get_session(sid).send("second prompt bravo", secrets=secrets)
    finally:
        other.close()

    assert not two.is_error, two.error
    assert (two.text, two.native_session_id) == ("turn two answer", one.native_session_id)
    assert (workspace_of(other, sid) / "canary.txt").read_text().strip() == "***"  # restored, redacted
    request = model.main_requests[-1]
    assert request.user_texts == ["first prompt alpha", "second prompt bravo"]
    assert "turn one answer, the secret was ***" in request.text  # scrubbed from OpenCode's db too
    assert canary not in json.dumps(request.json)

    seen = "".join(e.model_dump_json() for e in run.events) + one.model_dump_json()
    store = store_contents(workdir)
    assert any(name.endswith("!opencode.db") for name in store), "no database in the checkpoint"
    for value in (canary, key):
        assert value not in seen
        assert [name for name, data in store.items() if value.encode() in data] == []


@harness
async def test_http_errors_give_an_error_result_and_a_transient_5xx_is_retried(
    model: ScriptedModel, make_engine: EngineFactory
) -> None:
    model.add(
        error(400, "scripted bad request qx17"),
        error(500, "scripted overload", sticky=False),  # OpenCode retries 5xx after ~2 s …
        text("recovered"),  # … and gets this
    )
    session = opencode(make_engine).start_session()
    run = session.run("hello", secrets=secrets_for(model))
    result = await run

    assert (result.is_error, result.stop_reason) == (True, "error")
    assert result.error == "scripted bad request qx17 (HTTP 400)"
    assert any(isinstance(e, ErrorEvent) for e in run.events)
    assert (result.native_session_id or "").startswith("ses_")
    assert session.status == "failed"
    again = await session.send("again", secrets=secrets_for(model))
    assert (again.is_error, again.text) == (False, "recovered")
    assert [r.outcome for r in model.requests] == ["script"] * 3


class Verdict(BaseModel):
    title: str
    score: int


@harness
async def test_structured_output_a_replaced_prompt_an_mcp_tool_and_a_skill(
    model: ScriptedModel, make_engine: EngineFactory, tmp_path: Path, workdir: Path
) -> None:
    marker = tmp_path / "marker.json"
    server = McpServer.stdio(
        "marker", sys.executable, [str(SERVER), str(marker)], env_secrets={"MARKER_TOKEN": "MARKER_SECRET"}
    )
    skill = tmp_path / "skills" / "zebra-counter"
    skill.mkdir(parents=True)
    skill.joinpath("SKILL.md").write_text(
        "---\nname: zebra-counter\ndescription: Counts zebras (probe 7781)\n---\n"
    )
    token = "mcp-token-value-5be1c0de"
    model.add(
        tool_call("marker_make_marker", {"note": "from opencode"}), structured({"title": "fine", "score": 7})
    )
    engine = opencode(make_engine, mcp_servers=[server], skills=[SkillSource.local(str(skill))])
    session = engine.start_session(
        SessionConfig(system_prompt=SystemPrompt.replace("REPLACE-MARK-0417"), output_schema=Verdict)
    )
    run = session.run("judge it", secrets=secrets_for(model, MARKER_SECRET=token))
    result = await run

    assert not result.is_error, result.error
    assert result.structured_output == Verdict(title="fine", score=7)
    assert json.loads(marker.read_text()) == {
        "note": "from opencode",
        "token_set": True,
        "token_len": len(token),
    }
    [use] = [e for e in run.events if isinstance(e, ToolUseEvent)]
    assert (use.name, use.input) == ("mcp__marker__make_marker", {"note": "from opencode"})
    first = model.main_requests[0]
    assert "marker_make_marker" in first.tool_names
    system = first.system_text
    assert system.startswith("REPLACE-MARK-0417") and "You are OpenCode" not in system
    assert "zebra-counter" in system and "Counts zebras (probe 7781)" in system
    assert '"score": {"title": "Score", "type": "integer"}' in system  # the schema, in the instructions
    config = (
        workdir / "sessions" / session.session_id / "home" / "harness-run" / "opencode.json"
    ).read_text()
    assert token not in config and "_mcp_launcher.py" in config  # the engine starts the server
    started = next(e for e in run.events if isinstance(e, StartedEvent))
    assert [s.name for s in started.mcp_servers] == ["marker"]


# --- the driver's pure parts ----------------------------------------------------------------------


def context(tmp_path: Path, **changes: Any) -> TurnContext:
    changes.setdefault("binary", sys.executable)  # any executable: launch() only locates it
    return turn_context(tmp_path, "opencode", MODEL, **changes)


def test_launch_builds_argv_env_and_config_without_secrets(tmp_path: Path) -> None:
    driver = get_driver("opencode")
    assert isinstance(driver, OpenCodeDriver)
    ctx = context(
        tmp_path,
        env={"OPENAI_API_KEY": "sk-secret-value", "OPENAI_BASE_URL": "http://127.0.0.1:9/v1"},
        spec={
            "max_turns": 3,
            "max_budget_usd": 1.0,
            "permission_mode": "default",
            "allowed_tools": ["Bash"],
            "disallowed_tools": ["WebFetch"],
            "system_prompt": SystemPrompt.replace("be terse"),
        },
    )
    plan = driver.launch(ctx)
    # the bridge to `opencode serve` (the same argv on every turn); the turn is its stdin line
    assert plan.argv == [sys.executable, "-I", "-S", str(BRIDGE), sys.executable]
    turn = {
        "prompt": "-starts with a dash",
        "session": None,
        "title": f"harness-run {ctx.session_id}",
        "model": f"harness-run/{MODEL}",
        "auto": False,
    }
    assert (json.loads(plan.stdin or b""), plan.keep_stdin_open) == (turn, True)
    home = tmp_path / "home"
    assert plan.env["XDG_DATA_HOME"] == str(home / ".local" / "share")
    assert plan.env["OPENCODE_CONFIG"] == str(home / "harness-run" / "opencode.json")
    assert plan.env["OPENCODE_DISABLE_MODELS_FETCH"] == "1"
    config = json.loads(plan.files[home / "harness-run" / "opencode.json"])
    assert config["model"] == f"harness-run/{MODEL}"
    assert config["provider"]["harness-run"]["options"] == {
        "baseURL": "http://127.0.0.1:9/v1",
        "apiKey": "{env:OPENAI_API_KEY}",
    }
    assert config["agent"] == {"build": {"prompt": "be terse"}}  # max_turns: enforced by the parser
    # the mode's actions, the credential guards' patterns on top (webfetch: denied by the guards)
    permission = config["permission"]
    assert (permission["bash"]["*"], permission["edit"]["*"], permission["webfetch"]) == (
        "allow",
        "ask",
        "deny",
    )
    assert permission["bash"]["printenv"] == permission["read"]["*.env"] == "deny"
    assert config["tools"] == {"webfetch": False}
    assert "instructions" not in config
    assert json.loads(plan.files[home / ".config" / "opencode" / "package-lock.json"])["packages"]
    assert "sk-secret-value" not in " ".join(plan.argv) + "".join(plan.files.values())
    assert driver.ignored(ctx) == []
    assert driver.steer("more") is None and not driver.steering
    assert driver.skills_dir(tmp_path / "ws", home) == home / ".config" / "opencode" / "skills"

    resumed = driver.launch(context(tmp_path, resume=True, native_session_id="ses_1"))
    assert resumed.argv == plan.argv
    line = json.loads(resumed.stdin or b"")
    assert (line["session"], line["auto"]) == ("ses_1", True)  # bypassPermissions: auto-approve
    assert json.loads(resumed.files[home / "harness-run" / "opencode.json"])["model"] == MODEL


def test_settings_opencode_cannot_honour_are_refused_by_name(tmp_path: Path) -> None:
    driver = OpenCodeDriver()
    spec = {
        "allowed_tools": ["Bash", "Frobnicate"],
        "disallowed_tools": ["WebFetch", "Bash(rm:*)"],
        "max_budget_usd": 1.0,
    }
    ctx = turn_context(tmp_path, "opencode", "openai/gpt-unpriced-1", spec=spec, binary=sys.executable)
    with pytest.raises(UsageError) as caught:
        driver.check(ctx.spec)
    message = str(caught.value)
    assert "the opencode harness cannot honour allowed_tools, disallowed_tools, max_budget_usd" in message
    assert "['Frobnicate']" in message and "['Bash(rm:*)']" in message and "gpt-unpriced-1" in message
    with pytest.raises(UsageError):
        driver.launch(ctx)  # launch checks too: never silently ignored
    ctx = turn_context(
        tmp_path, "opencode", "anthropic/claude-sonnet-4-6", spec={"reasoning_effort": "high"}, env={}
    )
    assert driver.ignored(ctx) == ["reasoning_effort"]  # harmless: listed in the started event


def test_model_ids_map_onto_opencode_providers() -> None:
    assert opencode_model("openai/gpt-5.1", endpoint=True) == "harness-run/openai/gpt-5.1"
    assert opencode_model("gpt-5.1", endpoint=True) == "harness-run/gpt-5.1"
    assert opencode_model("openai/gpt-5.1", endpoint=False) == "openai/gpt-5.1"
    assert opencode_model("gpt-5.1", endpoint=False) == "openai/gpt-5.1"
    assert opencode_model("claude-sonnet-4-6", endpoint=False) == "anthropic/claude-sonnet-4-6"
    assert opencode_model("openrouter/openai/gpt-5.1", endpoint=True) == "harness-run/openai/gpt-5.1"


def test_locate_prefers_override_env_then_the_venv_install_then_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    driver = OpenCodeDriver()
    fake = tmp_path / "bin" / "opencode"
    fake.parent.mkdir()
    fake.write_text("#!/bin/sh\n")
    fake.chmod(0o755)
    monkeypatch.setenv("HARNESS_RUN_OPENCODE_BIN", str(fake))
    assert driver.locate(sys.executable) == sys.executable
    assert driver.locate() == str(fake)
    monkeypatch.delenv("HARNESS_RUN_OPENCODE_BIN")
    venv = tmp_path / "venv"
    monkeypatch.setattr(sys, "prefix", str(venv))
    monkeypatch.setenv("PATH", str(fake.parent))
    assert driver.locate() == str(fake)  # PATH
    npm_bin = venv / "opt" / "opencode" / "node_modules" / ".bin" / "opencode"
    npm_bin.parent.mkdir(parents=True)
    npm_bin.write_text("#!/bin/sh\n")
    npm_bin.chmod(0o755)
    assert driver.locate() == str(npm_bin)  # the venv's npm install wins over PATH
    npm_bin.unlink()
    monkeypatch.setenv("PATH", str(tmp_path / "nowhere"))
    with pytest.raises(HarnessNotFoundError, match=r"npm install -g opencode-ai@1\.18\.33"):
        driver.locate()


def test_the_parser_maps_opencode_lines_and_never_raises(tmp_path: Path) -> None:
    spec = {"mcp_servers": [McpServer.stdio("db", "true")], "output_schema": Verdict}
    parser = OpenCodeDriver().parser(context(tmp_path, spec=spec))
    ses = {"sessionID": "ses_9"}
    tool = {"type": "tool", "tool": "db_query", "callID": "c1"}
    lines: list[Any] = [
        {"type": "step_start", **ses, "part": {"type": "step-start"}},
        {"type": "reasoning", **ses, "part": {"text": "hmm"}},
        {
            "type": "tool_use",
            **ses,
            "part": {**tool, "state": {"status": "completed", "input": {"q": 1}, "output": "rows"}},
        },
        {
            "type": "tool_use",
            **ses,
            "part": {**tool, "tool": "bash", "callID": "c2", "state": {"status": "error", "error": "denied"}},
        },
        {
            "type": "step_finish",
            **ses,
            "part": {
                "reason": "tool-calls",
                "cost": 0.5,
                "tokens": {"input": 3, "output": 2, "reasoning": 1, "cache": {"read": 4, "write": 5}},
            },
        },
        {"type": "step_start", **ses, "part": {}},
        {
            "type": "text",
            **ses,
            "part": {"text": '```json\n{"title": "t", "score": 1}\n```', "messageID": "m2"},
        },
        {
            "type": "step_finish",
            **ses,
            "part": {"reason": "stop", "cost": 0.25, "tokens": {"input": 7, "output": 1}},
        },
        {"type": "tool_use", **ses, "part": "not a dict"},
        {"type": "done", **ses, "reason": "idle", "rejected": []},  # the bridge's end of the turn
    ]
    events = [e for line in [*map(json.dumps, lines), "garbage", "[1]", ""] for e in parser.feed(line)]
    types = ["started", "thinking", "tool_use", "tool_result", "tool_use", "tool_result", "message"]
    assert [e.type for e in events] == types
    uses = [e for e in events if isinstance(e, ToolUseEvent)]
    assert [(u.name, u.input) for u in uses] == [("mcp__db__query", {"q": 1}), ("bash", {})]
    assert [(e.content, e.is_error) for e in events if isinstance(e, ToolResultEvent)] == [
        ("rows", False),
        ("denied", True),
    ]
    assert parser.finished
    result = parser.finish(0, "")
    assert (result.is_error, result.native_session_id, result.num_turns, result.cost_usd) == (
        False,
        "ses_9",
        2,
        0.75,
    )
    assert result.usage.model_dump() == {
        "input_tokens": 10,
        "output_tokens": 3,
        "reasoning_tokens": 1,
        "cache_read_tokens": 4,
        "cache_write_tokens": 5,
    }
    assert result.structured_output == {"title": "t", "score": 1}

    crashed = OpenCodeDriver().parser(context(tmp_path))
    assert crashed.feed("oops") == [] and not crashed.finished
    failed = crashed.finish(1, "Error: boom\n")
    assert (failed.is_error, failed.cost_usd) == (True, None)
    assert (
        failed.error
        == "opencode exited (code 1) without finishing the turn: unexpected output from opencode: 'oops'\nError: boom"
    )


def test_native_files_scrub_secrets_from_the_database_before_a_checkpoint(tmp_path: Path) -> None:
    ctx = context(
        tmp_path, spec={"checkpoint": True}, env={"OPENAI_API_KEY": 'sk-"quoted"-secret', "HOME": "/h"}
    )
    driver = OpenCodeDriver()
    assert driver.native_files(ctx) == []
    db = driver.native_root(ctx) / "opencode.db"
    db.parent.mkdir(parents=True)
    conn = sqlite3.connect(db)  # stays open, as a live OpenCode's would: the rows sit in the WAL
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("CREATE TABLE part (id text PRIMARY KEY, data text NOT NULL, n integer)")
    rows = [("a", json.dumps({"out": 'key=sk-"quoted"-secret'}), 1), ("b", 'plain sk-"quoted"-secret /h', 2)]
    conn.executemany("INSERT INTO part VALUES (?, ?, ?)", rows)
    conn.commit()
    assert db.with_name("opencode.db-wal").stat().st_size > 0

    assert driver.native_files(ctx) == [db]  # the WAL folded in
    assert b"quoted" not in db.read_bytes()
    conn.close()
    data = dict(sqlite3.connect(db).execute("SELECT id, data FROM part").fetchall())
    assert data == {"a": '{"out": "key=***"}', "b": "plain *** /h"}
    plain = context(tmp_path, env=ctx.env)  # no checkpoint: listed, never touched
    assert driver.native_files(plain) == [db]


async def test_a_missing_binary_is_an_error_result_with_the_install_hint(
    make_engine: EngineFactory, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    session = opencode(make_engine).start_session()
    monkeypatch.setenv("HARNESS_RUN_OPENCODE_BIN", str(tmp_path / "no-opencode"))
    result = await session.run(
        "hi", secrets={"OPENAI_BASE_URL": "http://127.0.0.1:9/v1", "OPENAI_API_KEY": "k"}
    )
    assert (result.is_error, result.stop_reason) == (True, "error")
    assert "no-opencode" in (result.error or "") and "opencode-ai@1.18.33" in (result.error or "")


def test_the_parser_stops_the_turn_at_max_turns_or_the_budget_and_flags_an_unknown_price(
    tmp_path: Path,
) -> None:
    def step(reason: str, tokens: int, cost: float = 0.0) -> str:
        part = {"reason": reason, "cost": cost, "tokens": {"input": tokens, "output": 1}}
        return json.dumps({"type": "step_finish", "sessionID": "ses_1", "part": part})

    turns = OpenCodeDriver().parser(context(tmp_path, spec={"max_turns": 2}))
    turns.feed(step("tool-calls", 10))
    assert turns.stop_request is None
    turns.feed(step("tool-calls", 10))
    assert turns.stop_request is not None
    assert (turns.stop_request.reason, turns.stop_request.message) == (
        "max_turns",
        "Reached maximum number of turns (2)",
    )

    budget = OpenCodeDriver().parser(context(tmp_path, spec={"max_budget_usd": 1.0}))
    budget.feed(step("tool-calls", 100_000))  # $0.125 at gpt-5 prices
    assert budget.stop_request is None
    budget.feed(step("tool-calls", 0, cost=2.0))  # the CLI's own figure wins when it gives one
    assert budget.stop_request is not None and budget.stop_request.reason == "max_budget"

    unpriced = OpenCodeDriver().parser(turn_context(tmp_path, "opencode", "openai/gpt-unpriced-1"))
    events = unpriced.feed(step("stop", 10)) + unpriced.feed(step("stop", 10))
    [note] = [e for e in events if isinstance(e, CostUnknownEvent)]
    assert (note.model, note.harness) == ("openai/gpt-unpriced-1", "opencode")
    assert "gpt-unpriced-1" in note.message
    assert unpriced.finish(0, "").cost_usd is None
