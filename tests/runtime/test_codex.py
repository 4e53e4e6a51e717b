"""The real Codex CLI (the pinned openai-codex-cli-bin binary) against the scripted model: the seed
README's example, history across turns and engines, errors, structured output, instructions, MCP,
skills and secrets — plus the driver's pure parts (argv, config, event parsing).

``gpt-5.6-luna`` runs in Codex's code mode: its tools are offered in an ``additional_tools`` input
item (a JavaScript ``exec`` tool), not in ``tools``; the scripted model reads both, so its default
side-request heuristic applies as for any user. Its ``shell()`` intent still works, as a direct
``exec_command`` call, which Codex dispatches.
"""

from __future__ import annotations

import json
import shutil
import sys
import tomllib
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from harness_run import local
from harness_run.errors import UsageError
from harness_run.events import (
    CostUnknownEvent,
    ErrorEvent,
    MessageEvent,
    RetryEvent,
    StartedEvent,
    StatusEvent,
    ToolResultEvent,
    ToolUseEvent,
    WarningEvent,
)
from harness_run.harness import TurnContext, get_driver
from harness_run.harness import codex as codex_module
from harness_run.harness.codex import CodexDriver, strict_schema
from harness_run.spec import McpServer, SessionConfig, SkillSource, SystemPrompt, TurnConfig
from harness_run.testing import ScriptedModel, Usage, error, shell, structured, text
from harness_run.vocab.pricing import price

from ._helpers import API_KEY, processes_with, turn_context, wait_until, workspace_of
from .conftest import EngineFactory
from .test_secrets import store_contents

pytestmark = pytest.mark.harness

MODEL = "gpt-5.6-luna"
USAGE_KEYS = {"input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens", "reasoning_tokens"}
NO_RETRIES = {"HARNESS_RUN_CODEX_MAX_RETRIES": "0"}
SERVER = Path(__file__).with_name("mcp_marker_server.py")


@pytest.fixture
def codex_model() -> Iterator[ScriptedModel]:
    with ScriptedModel() as scripted:
        yield scripted


def secrets_for(model: ScriptedModel, **extra: str) -> dict[str, str]:
    return {"OPENAI_BASE_URL": model.openai_url, "OPENAI_API_KEY": API_KEY, **extra}  # redacted: not "test"


def codex(make_engine: EngineFactory, **fields: Any) -> local.LocalEngine:
    fields.setdefault("name", "code-agent")
    return make_engine(harness="codex", model=MODEL, **fields)


def developer_texts(request: Any) -> list[str]:
    return [
        c.get("text", "")
        for item in request.json.get("input", [])
        if item.get("role") == "developer"
        for c in item.get("content") or []
    ]


# --- the real binary ----------------------------------------------------------------------------


async def test_the_seed_example_runs_a_shell_command_and_reports_usage(
    codex_model: ScriptedModel, make_engine: EngineFactory
) -> None:
    first = Usage(input_tokens=100, output_tokens=7, cache_read_tokens=5, reasoning_tokens=2)
    codex_model.add(
        shell("printf 'def fibonacci(n): ...' > fib.py && echo created", usage=first),
        text("Created fib.py and ran the tests.", usage={"input_tokens": 200, "output_tokens": 9}),
    )
    engine = codex(make_engine, checkpoint=True)
    session = engine.start_session()
    run = session.run(
        "Create a Python function fibonacci(n), add a few tests, and run them.",
        secrets=secrets_for(codex_model),
    )
    result = await run

    assert not result.is_error, result.error
    assert (workspace_of(engine, session.session_id) / "fib.py").read_text() == "def fibonacci(n): ..."
    assert result.text == "Created fib.py and ran the tests."
    assert (result.stop_reason, result.harness, result.model) == ("completed", "codex", MODEL)
    assert result.num_turns == 2  # two model responses (the rollout's token_count events)
    assert set(result.usage.model_dump()) == USAGE_KEYS
    # OpenAI counts cached input in input_tokens and reasoning in output_tokens: kept apart here
    assert result.usage.model_dump() == {
        "input_tokens": 300,
        "output_tokens": 14,
        "cache_read_tokens": 5,
        "cache_write_tokens": 0,
        "reasoning_tokens": 2,
    }
    # Codex reports no cost: priced from the table ("gpt-5" prefix), consistent with the usage
    expected = price(MODEL, result.usage)
    assert expected is not None and expected > 0
    assert result.cost_usd == expected
    uuid.UUID(result.native_session_id or "")
    assert session.record.native_session_id == result.native_session_id

    types = [e.type for e in run.events]
    assert types[0] == "user"
    assert types[-1] == "result"
    assert types.index("tool_use") < types.index("tool_result") < types.index("message")
    [use] = [e for e in run.events if isinstance(e, ToolUseEvent)]
    assert use.name == "shell"
    assert "fib.py" in use.input["command"]
    [tool_result] = [e for e in run.events if isinstance(e, ToolResultEvent)]
    assert (tool_result.tool_use_id, tool_result.content, tool_result.is_error) == (
        use.tool_use_id,
        "created\n",
        False,
    )
    started = next(e for e in run.events if isinstance(e, StartedEvent))
    assert started.native_session_id == result.native_session_id
    assert (started.harness, started.model) == ("codex", MODEL)

    requests = codex_model.requests
    assert [(r.method, r.path, r.model) for r in requests] == [("POST", "/v1/responses", MODEL)] * 2
    assert "created" in requests[1].tool_results[0]
    home = engine.workdir / "sessions" / session.session_id / "home" / ".codex"
    [rollout] = home.glob(f"sessions/*/*/*/rollout-*-{result.native_session_id}.jsonl")
    assert session.record.native_started
    assert session.record.snapshot is not None and session.record.snapshot.native is not None
    assert rollout.is_file()


async def test_send_resumes_the_thread_with_its_history(
    codex_model: ScriptedModel, make_engine: EngineFactory
) -> None:
    codex_model.add(
        text("answer one bravo", usage={"input_tokens": 50, "output_tokens": 5}),
        text("answer two charlie", usage={"input_tokens": 70, "output_tokens": 6}),
    )
    engine = codex(make_engine)
    session = engine.start_session()
    big = "second prompt delta " + "x" * 200_000  # over Linux's 128 KiB limit for one argument
    one = await session.run("-first prompt alpha", secrets=secrets_for(codex_model))
    two = await session.send(big, secrets=secrets_for(codex_model), config=TurnConfig(model="gpt-5.6-terra"))

    assert (one.text, two.text) == ("answer one bravo", "answer two charlie")
    assert not one.is_error and not two.is_error
    assert one.native_session_id == two.native_session_id is not None
    first, second = codex_model.main_requests
    assert first.last_user_text == "-first prompt alpha"
    assert second.last_user_text == big
    assert "-first prompt alpha" in second.user_texts
    assert "answer one bravo" in second.text
    assert (first.model, second.model) == (MODEL, "gpt-5.6-terra")
    # usage per turn, not Codex's thread-cumulative figure
    assert (two.usage.input_tokens, two.usage.output_tokens, two.num_turns) == (70, 6, 1)
    assert [t.turn for t in session.history()] == [1, 2]


async def test_a_new_engine_reattaches_and_resumes_from_the_checkpoint(
    codex_model: ScriptedModel, make_engine: EngineFactory, workdir: Path
) -> None:
    codex_model.add(
        shell("printf 'from turn one' > made.txt"), text("turn one answer"), text("turn two answer")
    )
    engine = codex(make_engine, checkpoint=True)
    session = engine.start_session()
    one = await session.run("first prompt alpha", secrets=secrets_for(codex_model))
    assert not one.is_error, one.error
    sid = session.session_id
    await engine.aclose()  # this process is gone (its kept Codex with it): another machine goes on

    shutil.rmtree(workdir / "sessions" / sid / "home")  # CODEX_HOME with the rollout is gone
    shutil.rmtree(workdir / "sessions" / sid / "workspace")
    other = local.get_engine("code-agent", workdir=workdir)
    try:
        again = other.get_session(sid)
        two = await again.send("second prompt bravo", secrets=secrets_for(codex_model))
    finally:
        other.close()

    assert not two.is_error, two.error
    assert two.text == "turn two answer"
    assert two.native_session_id == one.native_session_id
    assert (workspace_of(other, sid) / "made.txt").read_text() == "from turn one"
    request = codex_model.main_requests[-1]
    assert request.user_texts[-2:] == ["first prompt alpha", "second prompt bravo"]
    assert "turn one answer" in request.text
    assert any("made.txt" in args for _, args in request.tool_calls)


@pytest.mark.parametrize(
    ("status", "message"),
    [(400, "scripted bad request qx17"), (500, "currently experiencing high demand")],  # Codex's own 5xx text
)
async def test_an_http_error_gives_an_error_result_and_the_session_stays_usable(
    codex_model: ScriptedModel, make_engine: EngineFactory, status: int, message: str
) -> None:
    codex_model.add(error(status, "scripted bad request qx17"), text("recovered"))
    engine = codex(make_engine, env=NO_RETRIES)
    session = engine.start_session()
    run = session.run("hello", secrets=secrets_for(codex_model))
    result = await run

    assert result.is_error
    assert result.stop_reason == "error"
    assert message in (result.error or "")
    assert any(isinstance(e, ErrorEvent) for e in run.events)
    assert [r.outcome for r in codex_model.requests] == ["script"]  # the spec's env: no retries
    assert session.status == "failed"
    again = await session.send("again", secrets=secrets_for(codex_model))
    assert (again.is_error, again.text) == (False, "recovered")


class Verdict(BaseModel):
    title: str
    score: int


async def test_structured_output_instructions_and_effort(
    codex_model: ScriptedModel, make_engine: EngineFactory
) -> None:
    codex_model.add(structured({"title": "looks fine", "score": 7}), text("plain"), text("fresh"))
    engine = codex(
        make_engine,
        output_schema=Verdict,
        reasoning_effort="high",
        system_prompt=SystemPrompt.inherit(append="APPEND-MARK-5521"),
    )
    session = engine.start_session()
    result = await session.run("judge it", secrets=secrets_for(codex_model))

    assert not result.is_error, result.error
    assert result.structured_output == Verdict(title="looks fine", score=7)
    first = codex_model.main_requests[0]
    fmt = first.json["text"]["format"]
    assert (fmt["type"], fmt["schema"]["properties"]) == (
        "json_schema",
        Verdict.model_json_schema()["properties"],
    )
    assert first.json["reasoning"]["effort"] == "high"
    developer = developer_texts(first)
    assert developer[0].startswith("You are Codex")  # inherit: Codex's own prompt stays first …
    assert "APPEND-MARK-5521" in developer[1:]  # … the appended text follows as a developer message

    replaced = await session.send(
        "plain please",
        secrets=secrets_for(codex_model),
        config=TurnConfig(
            system_prompt=SystemPrompt.replace("REPLACE-MARK-9912 you are terse"), output_schema=None
        ),
    )
    assert (replaced.text, replaced.structured_output) == ("plain", None)
    # mid-thread, Codex re-renders its base prompt with the replacement
    assert any("REPLACE-MARK-9912 you are terse" in t for t in developer_texts(codex_model.main_requests[1]))

    fresh = engine.start_session(
        SessionConfig(system_prompt=SystemPrompt.replace("REPLACE-MARK-0417"), output_schema=None)
    )
    assert not (await fresh.run("hi", secrets=secrets_for(codex_model))).is_error
    developer = developer_texts(codex_model.main_requests[2])
    assert developer[0] == "REPLACE-MARK-0417"  # replaces Codex's own prompt
    assert not any("You are Codex" in t for t in developer)


async def test_an_mcp_server_is_started_with_its_secret_and_a_skill_is_listed(
    codex_model: ScriptedModel, make_engine: EngineFactory, tmp_path: Path, workdir: Path
) -> None:
    # gpt-5.6-luna reaches MCP tools only from code-mode JavaScript (a custom tool call the scripted
    # model cannot make): check that the server is configured and started with its secret env.
    marker = tmp_path / "marker.json"
    started = tmp_path / "started.txt"
    wrapper = 'printf "%s" "$MARKER_TOKEN" | wc -c > "$0"; exec "$@"'
    server = McpServer.stdio(
        "marker",
        "sh",
        ["-c", wrapper, str(started), sys.executable, str(SERVER), str(marker)],
        env_secrets={"MARKER_TOKEN": "MARKER_SECRET"},
    )
    skill = tmp_path / "skills" / "zebra-counter"
    skill.mkdir(parents=True)
    skill.joinpath("SKILL.md").write_text(
        "---\nname: zebra-counter\ndescription: Counts zebras (probe 7781)\n---\n"
    )
    token = "mcp-token-value-5be1c0de"
    codex_model.add(text("ready"))
    engine = codex(make_engine, mcp_servers=[server], skills=[SkillSource.local(str(skill))], checkpoint=True)
    session = engine.start_session()
    run = session.run("what can you do?", secrets=secrets_for(codex_model, MARKER_SECRET=token))
    result = await run

    assert not result.is_error, result.error
    assert started.read_text().strip() == str(len(token))
    home = workdir / "sessions" / session.session_id / "home" / ".codex"
    config = tomllib.loads((home / "config.toml").read_text())
    launched = config["mcp_servers"]["marker"]  # the launcher: the engine starts the server
    assert launched["args"][-2:] == [str(_mcp_launcher_path()), "marker"] and "env_vars" not in launched
    assert token not in (home / "config.toml").read_text()
    assert token.encode() not in b"".join(store_contents(workdir).values())
    assert (home / "skills" / "zebra-counter" / "SKILL.md").is_file()
    listing = [t for t in developer_texts(codex_model.main_requests[0]) if "<skills_instructions>" in t]
    assert "zebra-counter: Counts zebras (probe 7781)" in listing[0]
    started = next(e for e in run.events if isinstance(e, StartedEvent))
    assert [(s.name, s.status) for s in started.mcp_servers] == [("marker", None)]


async def test_a_canary_secret_never_reaches_the_store(
    codex_model: ScriptedModel, make_engine: EngineFactory, workdir: Path
) -> None:
    canary = f"canary-{uuid.uuid4().hex}"
    key = f"sk-canary-{uuid.uuid4().hex}"
    codex_model.add(
        shell('echo "$CANARY_SECRET" > canary.txt; echo "key=$CANARY_SECRET"'),
        text(f"the secret was {canary}"),
    )
    engine = codex(make_engine, checkpoint=True, secrets=["CANARY_SECRET"])
    session = engine.start_session()
    secrets = {"OPENAI_BASE_URL": codex_model.openai_url, "OPENAI_API_KEY": key, "CANARY_SECRET": canary}
    run = session.run("write the secret", secrets=secrets)
    result = await run

    assert not result.is_error, result.error
    assert (workspace_of(engine, session.session_id) / "canary.txt").read_text().strip() == canary
    assert any(canary in r for r in codex_model.main_requests[1].tool_results)  # the agent had it
    assert codex_model.requests[0].headers["authorization"] == "***"
    seen = "".join(e.model_dump_json() for e in run.events) + result.model_dump_json()
    seen += "".join(t.model_dump_json() for t in session.history())
    assert "***" in seen
    store = store_contents(workdir)
    assert any("rollout-" in name for name in store), "no rollout in the checkpoint"
    for value in (canary, key):
        assert value not in seen
        assert [name for name, data in store.items() if value.encode() in data] == []


async def test_an_interrupted_turn_keeps_its_accounting_and_leaves_no_process(
    codex_model: ScriptedModel, make_engine: EngineFactory
) -> None:
    marker = f"sleep-{uuid.uuid4().hex[:8]}"
    codex_model.add(
        shell(f"sleep 30 && echo {marker}", usage={"input_tokens": 40, "output_tokens": 4}), text("after")
    )
    session = codex(make_engine).start_session()
    run = session.run("sleep", secrets=secrets_for(codex_model))
    async for event in run:
        if event.type == "tool_use":
            await wait_until(lambda: processes_with(marker), what="the sleep command")
            await session.interrupt()
    result = await run

    assert (result.stop_reason, result.is_error) == ("interrupted", False)
    assert (result.usage.input_tokens, result.usage.output_tokens, result.num_turns) == (40, 4, 1)
    assert processes_with(marker) == {}
    assert (await session.send("go on", secrets=secrets_for(codex_model))).text == "after"


# --- the driver's pure parts ----------------------------------------------------------------------


def context(tmp_path: Path, **changes: Any) -> TurnContext:
    return turn_context(tmp_path, "codex", MODEL, **changes)


def test_launch_without_an_endpoint_uses_the_builtin_provider_and_keeps_secrets_out_of_argv(
    tmp_path: Path,
) -> None:
    driver = get_driver("codex")
    assert isinstance(driver, CodexDriver)
    plan = driver.launch(context(tmp_path, spec={"max_turns": 3, "disallowed_tools": ["web_search"]}))
    # the session's process: the bridge to `codex app-server`, the same argv on every turn; the
    # turn is a JSON line on its stdin (the bridge asks app-server to run our guard hook untrusted)
    assert plan.argv[:4] == [
        sys.executable,
        "-I",
        "-S",
        str(Path(codex_module.__file__).with_name("_codex_bridge.py")),
    ]
    assert plan.argv[4] == driver.locate() and len(plan.argv) == 5
    assert json.loads(plan.stdin or b"") == {
        "prompt": "-starts with a dash",
        "thread_id": None,
        "model": MODEL,
        "cwd": str(tmp_path / "ws"),
        "output_schema": None,
    }
    assert plan.keep_stdin_open and driver.keeps_process
    assert plan.env["CODEX_HOME"] == str(tmp_path / "home" / ".codex")
    assert plan.env["CODEX_API_KEY"] == "sk-secret-value"  # the built-in provider reads only this
    [(path, text_)] = plan.files.items()
    config = tomllib.loads(text_)
    assert path == tmp_path / "home" / ".codex" / "config.toml"
    assert "model_provider" not in config
    assert config["web_search"] == "disabled"
    assert (config["analytics"], config["features"]["plugins"]) == ({"enabled": False}, False)
    assert "sk-secret-value" not in " ".join(plan.argv) + text_
    assert driver.steer("more") is None and not driver.steering
    assert driver.skills_dir(tmp_path / "ws", tmp_path / "home") == tmp_path / "home" / ".codex" / "skills"


def test_settings_codex_cannot_honour_are_refused_by_name(tmp_path: Path) -> None:
    driver = CodexDriver()
    server = McpServer.stdio("db", "true")
    spec = {
        "allowed_tools": ["Bash"],
        "disallowed_tools": ["Bash(git:*)", "web_search", "mcp__db__drop"],
        "mcp_servers": [server],
        "max_budget_usd": 1.0,
    }
    ctx = turn_context(tmp_path, "codex", "gpt-unpriced-1", spec=spec)
    with pytest.raises(UsageError) as caught:
        driver.check(ctx.spec)
    message = str(caught.value)
    assert "the codex harness cannot honour allowed_tools, disallowed_tools, max_budget_usd" in message
    assert "not ['Bash(git:*)']" in message and "'gpt-unpriced-1'" in message
    with pytest.raises(UsageError):
        driver.launch(ctx)  # launch checks too: never silently ignored
    # what Codex can do is kept: web_search off, the MCP tool disabled, a budget on a priced model
    ok = context(
        tmp_path, spec={**spec, "allowed_tools": [], "disallowed_tools": ["web_search", "mcp__db__drop"]}
    )
    config = tomllib.loads(driver.launch(ok).files[tmp_path / "home" / ".codex" / "config.toml"])
    assert config["web_search"] == "disabled"
    assert config["mcp_servers"]["db"]["disabled_tools"] == ["drop"]


def test_openrouter_model_ids_lose_their_routing_prefix(tmp_path: Path) -> None:
    plan = CodexDriver().launch(turn_context(tmp_path, "codex", "openrouter/openai/gpt-5.1"))
    assert json.loads(plan.stdin or b"")["model"] == "openai/gpt-5.1"


def test_launch_resumes_by_thread_id(tmp_path: Path) -> None:
    ctx = context(tmp_path, resume=True, native_session_id="thread-1", spec={"output_schema": Verdict})
    plan = CodexDriver().launch(ctx)
    first = CodexDriver().launch(context(tmp_path, spec={"output_schema": Verdict}))
    assert (plan.argv, plan.env, plan.files) == (first.argv, first.env, first.files)  # one process
    turn = json.loads(plan.stdin or b"")
    assert turn["thread_id"] == "thread-1"
    # made strict, as OpenAI requires for Codex's strict json_schema format
    assert turn["output_schema"] == {**Verdict.model_json_schema(), "additionalProperties": False}


class Change(BaseModel):
    path: str
    properties: list[str] = []  # a field named like the schema keyword


class Plan(BaseModel):
    changes: list[Change]
    note: str | None = None


def test_output_schemas_are_made_strict() -> None:
    schema = strict_schema(Plan.model_json_schema())
    assert (schema["additionalProperties"], schema["required"]) == (False, ["changes", "note"])
    change = schema["$defs"]["Change"]
    assert (change["additionalProperties"], change["required"]) == (False, ["path", "properties"])
    assert set(change["properties"]) == {"path", "properties"}
    assert "additionalProperties" not in change["properties"]
    loose = {"type": "object", "properties": {"a": {"type": "integer"}}, "additionalProperties": True}
    assert strict_schema(loose) == loose  # an explicit choice is kept


def test_the_parser_maps_codex_events_and_never_raises(tmp_path: Path) -> None:
    parser = CodexDriver().parser(context(tmp_path))
    lines: list[Any] = [
        {"type": "thread.started", "thread_id": "t-1"},
        {"type": "error", "message": "Reconnecting... 1/5 (busy)"},
        {"type": "item.completed", "item": {"id": "i0", "type": "error", "message": "config warning"}},
        {"type": "item.completed", "item": {"id": "i1", "type": "reasoning", "text": "hmm"}},
        {
            "type": "item.completed",
            "item": {
                "id": "i2",
                "type": "mcp_tool_call",
                "server": "db",
                "tool": "query",
                "arguments": {"q": 1},
                "result": {"content": [{"type": "text", "text": "rows"}]},
                "status": "completed",
            },
        },
        {
            "type": "item.completed",
            "item": {
                "id": "i3",
                "type": "file_change",
                "changes": [{"path": "a.py", "kind": "add"}],
                "status": "completed",
            },
        },
        {"type": "item.completed", "item": {"id": "i4", "type": "agent_message", "text": "done"}},
        {"type": "item.completed", "item": "not a dict"},
        {"type": "turn.failed", "error": {"message": json.dumps({"error": {"message": "quota gone"}})}},
    ]
    events = [e for line in [*map(json.dumps, lines), "garbage", "[1, 2]", ""] for e in parser.feed(line)]
    types = "started retry warning thinking tool_use tool_result tool_use tool_result message"
    assert [e.type for e in events] == types.split()
    assert [type(e) for e in events if isinstance(e, StatusEvent)] == [StartedEvent, RetryEvent, WarningEvent]
    retry = next(e for e in events if isinstance(e, RetryEvent))
    assert (retry.attempt, retry.max_attempts, retry.message) == (1, 5, "Reconnecting... 1/5 (busy)")
    assert next(e for e in events if isinstance(e, WarningEvent)).message == "config warning"
    uses = [e for e in events if isinstance(e, ToolUseEvent)]
    assert [(u.name, u.input) for u in uses] == [
        ("mcp__db__query", {"q": 1}),
        ("file_change", {"changes": [{"path": "a.py", "kind": "add"}]}),
    ]
    assert [e.content for e in events if isinstance(e, ToolResultEvent)] == ["rows", "add a.py"]
    assert [e.text for e in events if isinstance(e, MessageEvent)] == ["done"]
    assert parser.finished
    result = parser.finish(1, "")
    assert (result.is_error, result.error, result.text, result.native_session_id) == (
        True,
        "quota gone",
        "done",
        "t-1",
    )


def test_a_crash_without_a_turn_end_is_an_error_with_stderr(tmp_path: Path) -> None:
    parser = CodexDriver().parser(context(tmp_path, resume=True, native_session_id="gone"))
    assert parser.feed("") == []
    assert not parser.finished
    result = parser.finish(
        1, "Reading additional input from stdin...\nError: no rollout found for thread id gone\n"
    )
    assert result.is_error and result.stop_reason == "error"
    assert (
        result.error
        == "codex exited (code 1) without finishing the turn: Error: no rollout found for thread id gone"
    )


def test_the_parser_watches_the_rollout_for_max_turns_and_the_budget(tmp_path: Path) -> None:
    rollout = tmp_path / "home" / ".codex" / "sessions" / "2026" / "12" / "02" / "rollout-x-t-1.jsonl"
    rollout.parent.mkdir(parents=True)

    def record(tokens: int) -> None:
        usage = {"input_tokens": tokens, "output_tokens": 1}
        with rollout.open("a") as handle:
            handle.write(json.dumps({"type": "token_usage_record", "payload": {"usage": usage}}) + "\n")

    def tool(kind: str, item_id: str) -> str:
        return json.dumps(
            {"type": kind, "item": {"id": item_id, "type": "command_execution", "command": "x"}}
        )

    parser = CodexDriver().parser(context(tmp_path, spec={"max_turns": 2}))
    parser.feed(json.dumps({"type": "thread.started", "thread_id": "t-1"}))
    record(10)
    parser.feed(tool("item.started", "a"))
    parser.feed(tool("item.completed", "a"))
    assert parser.stop_request is None
    record(10)
    parser.feed(tool("item.started", "b"))
    assert parser.stop_request is None  # the second response's tool runs first
    parser.feed(tool("item.completed", "b"))
    assert parser.stop_request is not None and parser.stop_request.reason == "max_turns"
    result = parser.finish(-15, "")
    assert (result.num_turns, result.usage.input_tokens) == (2, 20)

    rollout.unlink()
    budget = CodexDriver().parser(context(tmp_path, spec={"max_budget_usd": 1.0}))
    budget.feed(json.dumps({"type": "thread.started", "thread_id": "t-1"}))
    record(1_000_000)  # $1.25 at gpt-5 prices: stopped before its tool runs
    budget.feed(tool("item.started", "a"))
    assert budget.stop_request is not None and budget.stop_request.reason == "max_budget"
    assert "Reached maximum budget ($1)" in budget.stop_request.message


def test_an_unpriced_model_gets_a_cost_unknown_event(tmp_path: Path) -> None:
    parser = CodexDriver().parser(turn_context(tmp_path, "codex", "gpt-unpriced-1"))
    events = parser.feed(json.dumps({"type": "thread.started", "thread_id": "t-1"}))
    assert [type(e) for e in events if isinstance(e, StatusEvent)] == [StartedEvent, CostUnknownEvent]


def _mcp_launcher_path() -> Path:
    import harness_run.security

    return Path(harness_run.security.__file__).with_name("_mcp_launcher.py")
