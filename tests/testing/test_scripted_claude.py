"""The scripted model against the REAL Claude Code CLI (the binary bundled in claude-agent-sdk)."""

from __future__ import annotations

import json
import os
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from harness_run.testing import (
    Rule,
    ScriptedModel,
    Usage,
    combine,
    drop,
    error,
    shell,
    structured,
    text,
    write_file,
)

pytestmark = pytest.mark.harness


@dataclass
class ClaudeRun:
    returncode: int
    lines: list[dict[str, Any]]
    stderr: str
    seconds: float

    @property
    def result(self) -> dict[str, Any]:
        results = [line for line in self.lines if line.get("type") == "result"]
        assert results, f"no result line (rc={self.returncode}); stderr: {self.stderr[-2000:]}"
        return results[-1]

    @property
    def session_id(self) -> str:
        return str(self.result["session_id"])


def run_claude(
    binary: Path, model: ScriptedModel, workspace: Path, prompt: str, *extra: str, timeout: float = 60
) -> ClaudeRun:
    """One headless ``claude -p`` turn against ``model`` with an isolated config dir and HOME."""
    home = workspace.parent / "home"
    home.mkdir(exist_ok=True)
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        **model.env_for("claude-code"),
        "CLAUDE_CONFIG_DIR": str(home / ".claude"),
        "CLAUDE_CODE_MAX_RETRIES": "0",
        "HOME": str(home),
    }
    cmd = [
        str(binary),
        "-p",
        prompt,
        "--output-format",
        "stream-json",
        "--verbose",
        "--allowedTools",
        "Bash",
        "Write",
        "--model",
        "claude-sonnet-4-6",
        *extra,
    ]
    started = time.monotonic()
    proc = subprocess.run(
        cmd,
        cwd=workspace,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
        check=False,
    )
    lines = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    return ClaudeRun(proc.returncode, lines, proc.stderr, time.monotonic() - started)


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    ws = tmp_path / "ws"
    ws.mkdir()
    return ws


def test_shell_intent_runs_a_command_that_creates_a_file(claude_binary: Path, workspace: Path) -> None:
    with ScriptedModel([shell("echo hi > out.txt"), text("done")]) as model:
        run = run_claude(claude_binary, model, workspace, "create out.txt")
    assert run.result["is_error"] is False
    assert run.result["result"] == "done"
    assert (workspace / "out.txt").read_text() == "hi\n"
    assert [r.outcome for r in model.requests] == ["script", "script"]
    first, second = model.requests
    assert first.path == "/v1/messages"
    assert first.query == "beta=true"
    assert first.stream
    assert "Bash" in first.tool_names
    assert first.last_user_text == "create out.txt"
    assert second.has_tool_result
    assert second.tool_calls[0][0] == "Bash"
    assert first.headers["x-api-key"] == "***"
    assert run.seconds < 20


def test_write_file_intent_creates_the_file(claude_binary: Path, workspace: Path) -> None:
    with ScriptedModel([write_file("pkg/hello.py", "print('hello')\n"), text("written")]) as model:
        run = run_claude(claude_binary, model, workspace, "write hello.py")
    assert run.result["is_error"] is False
    assert (workspace / "pkg" / "hello.py").read_text() == "print('hello')\n"
    assert "File created successfully" in model.requests[-1].tool_results[0]


def test_two_tool_calls_in_one_reply_with_thinking(claude_binary: Path, workspace: Path) -> None:
    reply = combine(shell("touch a.txt"), shell("touch b.txt")).with_options(thinking="two files needed")
    with ScriptedModel([reply, text("both")]) as model:
        run = run_claude(claude_binary, model, workspace, "make two files")
    assert (workspace / "a.txt").exists()
    assert (workspace / "b.txt").exists()
    assert len(model.requests[-1].tool_results) == 2
    blocks = [b for line in run.lines if line.get("type") == "assistant" for b in line["message"]["content"]]
    assert any(b.get("type") == "thinking" and b.get("thinking") == "two files needed" for b in blocks)


def test_resume_carries_the_first_turns_history(claude_binary: Path, workspace: Path) -> None:
    with ScriptedModel([shell("echo one > one.txt"), text("first done"), text("second done")]) as model:
        first = run_claude(claude_binary, model, workspace, "turn one please")
        assert first.result["result"] == "first done"
        second = run_claude(claude_binary, model, workspace, "turn two please", "--resume", first.session_id)
    assert second.result["is_error"] is False
    assert second.result["result"] == "second done"
    assert second.session_id == first.session_id
    last = model.requests[-1]
    assert last.last_user_text == "turn two please"
    assert last.user_texts[0] == "turn one please"
    assert "first done" in last.text
    assert any(name == "Bash" and "echo one" in args for name, args in last.tool_calls)
    assert len(last.messages) > len(model.requests[0].messages)


@pytest.mark.parametrize(("status", "message"), [(500, "scripted boom"), (400, "scripted bad request")])
def test_error_reply_gives_an_error_result(
    claude_binary: Path, workspace: Path, status: int, message: str
) -> None:
    with ScriptedModel([error(status, message), text("not reached")]) as model:
        run = run_claude(claude_binary, model, workspace, "hi")
    assert run.result["is_error"] is True
    assert message in run.result["result"]
    assert str(status) in run.result["result"]
    assert model.remaining == 1  # Claude Code's retries (a 400 is retried without betas) got the same error
    assert {r.outcome for r in model.requests[1:]} <= {"retry"}


def test_structured_output_lands_in_the_result(claude_binary: Path, workspace: Path) -> None:
    schema = {"type": "object", "properties": {"answer": {"type": "integer"}}, "required": ["answer"]}
    with ScriptedModel([structured({"answer": 42})]) as model:
        run = run_claude(claude_binary, model, workspace, "answer", "--json-schema", json.dumps(schema))
    assert run.result["is_error"] is False
    assert run.result["structured_output"] == {"answer": 42}
    assert "StructuredOutput" in model.requests[0].tool_names
    assert not model.exhausted


def test_drop_gives_an_error_result_not_a_hang(claude_binary: Path, workspace: Path) -> None:
    with ScriptedModel([drop("partial answ")]) as model:
        run = run_claude(claude_binary, model, workspace, "hi", timeout=30)
    assert run.result["is_error"] is True
    assert "connection" in run.result["result"].lower() or "error" in run.result["result"].lower()
    assert not model.exhausted  # the non-streamed fallback retry was dropped as well
    assert [r.stream for r in model.requests] == [True, False]


def test_scripted_usage_shows_in_the_result(claude_binary: Path, workspace: Path) -> None:
    usage = Usage(input_tokens=1234, output_tokens=56, cache_read_tokens=700, cache_write_tokens=89)
    with ScriptedModel([text("counted", usage=usage)]) as model:
        run = run_claude(claude_binary, model, workspace, "count")
    got = run.result["usage"]
    assert (got["input_tokens"], got["output_tokens"]) == (1234, 56)
    assert (got["cache_read_input_tokens"], got["cache_creation_input_tokens"]) == (700, 89)
    assert run.result["total_cost_usd"] > 0
    assert len(model.requests) == 1


def test_rules_and_a_yaml_script_file(claude_binary: Path, workspace: Path, tmp_path: Path) -> None:
    script = tmp_path / "script.yaml"
    script.write_text(
        "- rules:\n"
        "    - match: marker\n"
        "      reply: {shell: 'echo ruled > ruled.txt'}\n"
        "    - tool_result: true\n"
        "      reply: {text: 'rule says done', usage: {input_tokens: 77, output_tokens: 7}}\n"
    )
    model = ScriptedModel.from_file(script)
    model.add(Rule(match="other", reply=text("unused")))
    with model:
        run = run_claude(claude_binary, model, workspace, "please do the marker thing")
    assert run.result["result"] == "rule says done"
    assert (workspace / "ruled.txt").read_text() == "ruled\n"
    assert [r.rule_index for r in model.requests] == [0, 1]
