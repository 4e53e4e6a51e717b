"""Script files (YAML/JSON), the ``mock-model`` foreground server and the pytest fixture."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
import urllib.request
from pathlib import Path

import pytest

from harness_run.errors import UsageError
from harness_run.testing import (
    HttpError,
    Reply,
    Rule,
    Shell,
    Structured,
    Text,
    ToolCall,
    Usage,
    WriteFile,
    load_script,
    parse_script,
)

GOOD_YAML = """\
- text: "I'll create it."
  shell: "echo hi > out.txt"
  usage: {input_tokens: 100, output_tokens: 20}
  delay: 0.1
  thinking: "needs a file"
- write_file: {path: a.py, content: "print(1)\\n"}
- tool_call: {name: Read, input: {file_path: /etc/hostname}}
- structured: {answer: 42}
- parts: [{shell: ls}, {shell: pwd}]
- error: {status: 500, message: boom}
- error: 429
  sticky: false
- drop: "partial"
- done
- rules:
    - match: hello
      contains: secret
      tool_result: null
      times: 2
      reply: {text: "hi there"}
    - reply: fallback
"""


def test_load_yaml_with_the_whole_vocabulary(tmp_path: Path) -> None:
    path = tmp_path / "s.yaml"
    path.write_text(GOOD_YAML)
    items = load_script(path)
    replies = [i for i in items if isinstance(i, Reply)]
    rules = [i for i in items if isinstance(i, Rule)]
    assert len(replies) == 9
    assert len(rules) == 2
    first = replies[0]
    assert first.parts == (Text("I'll create it."), Shell("echo hi > out.txt"))
    assert first.usage == Usage(input_tokens=100, output_tokens=20)
    assert (first.delay, first.thinking) == (0.1, "needs a file")
    assert replies[1].parts == (WriteFile("a.py", "print(1)\n"),)
    assert replies[2].parts == (ToolCall("Read", {"file_path": "/etc/hostname"}),)
    assert replies[3].parts == (Structured({"answer": 42}),)
    assert replies[4].parts == (Shell("ls"), Shell("pwd"))
    assert replies[5].http_error == HttpError(500, "boom")
    assert replies[5].sticky
    assert replies[6].http_error is not None
    assert replies[6].http_error.status == 429
    assert not replies[6].sticky
    assert replies[7].drop_connection
    assert replies[7].parts == (Text("partial"),)
    assert replies[8].parts == (Text("done"),)
    assert (rules[0].match, rules[0].contains, rules[0].tool_result, rules[0].times) == (
        "hello",
        "secret",
        None,
        2,
    )
    assert rules[1].reply.parts == (Text("fallback"),)
    assert rules[1].tool_result is False


def test_load_json_and_mapping_form(tmp_path: Path) -> None:
    path = tmp_path / "s.json"
    path.write_text(json.dumps({"script": [{"text": "a"}, {"shell": "ls"}]}))
    assert [r.parts for r in load_script(path) if isinstance(r, Reply)] == [(Text("a"),), (Shell("ls"),)]
    assert parse_script(None) == []


@pytest.mark.parametrize(
    ("data", "where", "what"),
    [
        ([{"text": "ok"}, {"write_file": {"path": "a.py"}}], "script[1].write_file.content", "missing"),
        ([{"shell": 5}], "script[0].shell", "expected a string"),
        ([{"txt": "typo"}], "script[0]", "unknown key(s) ['txt']"),
        ([{"usage": {"input_tokens": 1}}], "script[0]", "no reply part"),
        ([{"text": "a", "usage": {"inputs": 1}}], "script[0].usage", "unknown usage field"),
        ([{"text": "a", "usage": {"input_tokens": -1}}], "script[0].usage", "non-negative"),
        ([{"text": "a", "delay": "soon"}], "script[0].delay", "seconds"),
        ([{"error": {"status": 200}}], "script[0].error.status", "400-599"),
        ([{"error": {"message": "x"}}], "script[0].error.status", "missing"),
        ([{"error": 500, "text": "x"}], "script[0]", "cannot be combined"),
        ([{"drop": 3}], "script[0].drop", "expected true"),
        ([{"tool_call": {"input": {}}}], "script[0].tool_call.name", "missing"),
        ([{"parts": [{"shell": "a", "text": "b"}]}], "script[0].parts[0]", "exactly one"),
        ([{"rules": [{"match": "x"}]}], "script[0].rules[0].reply", "missing"),
        ([{"rules": [{"reply": "x", "times": 0}]}], "script[0].rules[0].times", "positive"),
        ([{"rules": [{"reply": {"shel": "x"}}]}], "script[0].rules[0].reply", "unknown key"),
        ([{"rules": "nope"}], "script[0].rules", "expected a list"),
        ({"steps": []}, "top level", "unknown key"),
        ("just text", "top level", "expected a list"),
    ],
)
def test_bad_scripts_name_the_entry_and_field(data: object, where: str, what: str) -> None:
    with pytest.raises(UsageError) as info:
        parse_script(data, source="bad.yaml")
    message = str(info.value)
    assert message.startswith(f"bad.yaml: {where}:"), message
    assert what in message


def test_unreadable_and_unparsable_files(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="cannot read script file"):
        load_script(tmp_path / "missing.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("- text: [unclosed\n")
    with pytest.raises(UsageError, match="not valid YAML"):
        load_script(bad)
    bad_json = tmp_path / "bad.json"
    bad_json.write_text("{")
    with pytest.raises(UsageError, match="not valid JSON"):
        load_script(bad_json)


def test_serve_forever_prints_env_and_stops_on_sigterm(tmp_path: Path) -> None:
    script = tmp_path / "s.yaml"
    script.write_text("- text: served from file\n")
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    code = (
        "import sys; from harness_run.testing._cli import serve_forever; "
        f"sys.exit(serve_forever({str(script)!r}, '127.0.0.1', {port}))"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", code],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    try:
        assert proc.stdout is not None
        first = proc.stdout.readline()
        assert first.startswith("scripted model listening on http://127.0.0.1:")
        url = first.split()[4]
        assert url == f"http://127.0.0.1:{port}"
        lines = [proc.stdout.readline() for _ in range(12)]
        assert f"export ANTHROPIC_BASE_URL={url}\n" in lines
        assert f"export OPENAI_BASE_URL={url}/v1\n" in lines
        body = json.dumps({"model": "m", "messages": [{"role": "user", "content": "hi"}]}).encode()
        req = urllib.request.Request(f"{url}/v1/chat/completions", data=body, method="POST")
        with urllib.request.urlopen(req, timeout=10) as resp:
            assert json.loads(resp.read())["choices"][0]["message"]["content"] == "served from file"
        proc.send_signal(signal.SIGTERM)
        rest, _ = proc.communicate(timeout=10)
        assert proc.returncode == 0
        assert "[script] POST /v1/chat/completions -> text('served from file')" in rest
        assert "stopped after 1 requests" in rest
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_serve_forever_rejects_a_bad_script(tmp_path: Path) -> None:
    from harness_run.testing._cli import serve_forever

    script = tmp_path / "s.yaml"
    script.write_text("- shell: [1]\n")
    with pytest.raises(UsageError, match=r"script\[0\]\.shell"):
        serve_forever(str(script), "127.0.0.1", 0)


def test_pytest_fixture(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD", "1")  # only our plugin, and fast
    pytester.makepyfile(
        textwrap.dedent(
            """
            import json, urllib.request
            from harness_run.testing import text

            def test_uses_fixture(scripted_model):
                scripted_model.add(text("from fixture"))
                body = json.dumps({"model": "m", "messages": [{"role": "user", "content": "x"}]}).encode()
                req = urllib.request.Request(scripted_model.openai_url + "/chat/completions", data=body)
                with urllib.request.urlopen(req) as resp:
                    answer = json.loads(resp.read())["choices"][0]["message"]["content"]
                assert answer == "from fixture"
                assert scripted_model.running
            """
        )
    )
    result = pytester.runpytest("-p", "harness_run.testing.pytest_plugin")
    result.assert_outcomes(passed=1)


def test_example_scripts_load() -> None:
    examples = sorted((Path(__file__).parents[2] / "examples" / "scripts").glob("*.yaml"))
    assert examples
    for path in examples:
        assert load_script(path), path


async def test_usable_from_async_code() -> None:
    import asyncio

    from harness_run.testing import ScriptedModel, text

    def ask(url: str) -> str:
        body = json.dumps({"model": "m", "messages": [{"role": "user", "content": "x"}]}).encode()
        with urllib.request.urlopen(urllib.request.Request(url, data=body), timeout=10) as resp:
            return json.loads(resp.read())["choices"][0]["message"]["content"]

    with ScriptedModel([text("one"), text("two")]) as model:
        url = f"{model.openai_url}/chat/completions"
        answers = await asyncio.gather(asyncio.to_thread(ask, url), asyncio.to_thread(ask, url))
    assert sorted(answers) == ["one", "two"]
