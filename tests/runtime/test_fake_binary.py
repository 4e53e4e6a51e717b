"""A missing ``claude`` binary and fake ones that print malformed stream lines: clear error results,
no tracebacks, the turn timeout still applies. (No real CLI here: fakes are small scripts.)"""

from __future__ import annotations

import shutil
import stat
import uuid
from pathlib import Path

import pytest

from harness_run.errors import HarnessNotFoundError
from harness_run.harness.claude_code import ClaudeCodeDriver
from harness_run.spec import TurnConfig
from harness_run.testing import ScriptedModel

from ._helpers import claude_descendants, model_secrets, processes_with
from .conftest import EngineFactory


def fake_claude(tmp_path: Path, body: str) -> str:
    path = tmp_path / "bin" / "claude"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/bin/bash\n" + body)
    path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return str(path)


async def test_a_missing_binary_gives_an_error_result_that_says_how_to_install(
    model: ScriptedModel,
    make_engine: EngineFactory,
) -> None:
    engine = make_engine(claude_binary="/nonexistent/claude")
    session = engine.start_session()
    result = await session.run("hello", secrets=model_secrets(model))
    assert result.is_error
    assert result.stop_reason == "error"
    assert "/nonexistent/claude" in (result.error or "")
    assert "pip install" in (result.error or "")
    assert "Traceback" not in (result.error or "")
    assert model.requests == []
    assert session.status == "failed"
    with pytest.raises(HarnessNotFoundError, match="pip install"):  # the driver's own error says the same
        ClaudeCodeDriver().locate("/nonexistent/claude")


async def test_garbage_output_and_a_failing_exit_give_a_clear_error(
    model: ScriptedModel,
    make_engine: EngineFactory,
    tmp_path: Path,
) -> None:
    binary = fake_claude(
        tmp_path,
        "echo 'this is not json'\necho '{\"type\": \"assis'\necho 'fatal: something broke' >&2\nexit 1\n",
    )
    session = make_engine(claude_binary=binary).start_session()
    result = await session.run("hello", secrets=model_secrets(model))
    assert result.is_error
    assert result.stop_reason == "error"
    error = result.error or ""
    assert "code 1" in error
    assert "unexpected output" in error
    assert '{"type": "assis' in error
    assert "fatal: something broke" in error  # the stderr tail
    assert "Traceback" not in error
    assert result.cost_usd is None  # nothing reported: unknown, never a made-up 0


async def test_malformed_lines_between_valid_ones_are_skipped(
    model: ScriptedModel,
    make_engine: EngineFactory,
    tmp_path: Path,
) -> None:
    sid_var = "$SID"
    body = (
        "read -r first\n"  # the prompt message arrives on stdin (stream-json input)
        f"SID={uuid.uuid4()}\n"
        "echo '%%% garbage %%%'\n"
        "echo '{not json'\n"
        "echo '[1, 2, 3]'\n"
        'echo \'{"type": "assistant", "message": {"id": "m1", "content": '
        '[{"type": "text", "text": "hello from the fake"}]}}\'\n'
        'echo \'{"type": "mystery", "x": 1}\'\n'
        'echo \'{"type": "result", "subtype": "success", "is_error": false, "num_turns": 1, '
        '"result": "fake done", "session_id": "\'' + sid_var + "'\", "
        '"usage": {"input_tokens": 1000000, "output_tokens": 0}}\'\n'
    )
    session = make_engine(claude_binary=fake_claude(tmp_path, body)).start_session()
    run = session.run("hello", secrets=model_secrets(model))
    result = await run
    assert not result.is_error, result.error
    assert result.text == "fake done"
    assert [e.text for e in run.events if e.type == "message"] == ["hello from the fake"]
    # no total_cost_usd from the "CLI": priced from the table for a known model ($3 per 1M input tokens)
    assert result.cost_usd == pytest.approx(3.0)
    assert result.usage.input_tokens == 1_000_000


async def test_no_cost_from_the_cli_and_an_unknown_model_gives_none(
    model: ScriptedModel,
    make_engine: EngineFactory,
    tmp_path: Path,
) -> None:
    body = (
        "read -r first\n"
        'echo \'{"type": "result", "subtype": "success", "is_error": false, "num_turns": 1, '
        '"result": "ok", "usage": {"input_tokens": 10, "output_tokens": 5}}\'\n'
    )
    engine = make_engine(model="claude-unknown-model-7", claude_binary=fake_claude(tmp_path, body))
    result = await engine.start_session().run("hello", secrets=model_secrets(model))
    assert not result.is_error, result.error
    assert result.usage.input_tokens == 10
    assert result.cost_usd is None


async def test_a_hanging_binary_is_stopped_by_the_turn_timeout(
    model: ScriptedModel,
    make_engine: EngineFactory,
    tmp_path: Path,
) -> None:
    marker = f"sleep 31.{uuid.uuid4().int % 10**6:06d}"
    binary = fake_claude(tmp_path, f"echo 'garbage before hanging'\n{marker}\necho never\n")
    session = make_engine(claude_binary=binary).start_session()
    result = await session.run("hello", secrets=model_secrets(model), config=TurnConfig(timeout=1.5))
    assert result.is_error
    assert result.stop_reason == "timeout"
    assert "timed out after 1.5 s" in (result.error or "")
    assert processes_with(marker) == {}
    assert claude_descendants() == {}


async def test_a_short_secret_value_does_not_corrupt_the_restored_workspace(
    model: ScriptedModel,
    make_engine: EngineFactory,
    tmp_path: Path,
) -> None:
    body = (
        "read -r first\n"
        "[ -e data.txt ] || printf 'version 1.2.1 of pin-1\\n' > data.txt\n"
        'echo \'{"type": "result", "subtype": "success", "is_error": false, "result": "ok"}\'\n'
    )
    engine = make_engine(checkpoint=True, secrets=["PIN"], claude_binary=fake_claude(tmp_path, body))
    session = engine.start_session()
    secrets = model_secrets(model, PIN="1")  # too short to redact without mangling everything
    assert not (await session.run("one", secrets=secrets)).is_error
    workspace = engine.workdir / "sessions" / session.session_id / "workspace"
    shutil.rmtree(workspace)
    assert not (await session.run("two", secrets=secrets)).is_error
    assert (workspace / "data.txt").read_text() == "version 1.2.1 of pin-1\n"  # restored as it was
