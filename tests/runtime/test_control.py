"""Turn control on every harness: steering with message ids (Claude Code) or a clear refusal (Codex,
OpenCode), interrupt keeping the accounting and the conversation, exec() with timeout and output cap."""

from __future__ import annotations

import asyncio
import uuid

import pytest

from harness_run import Secret
from harness_run.errors import UsageError
from harness_run.events import UserEvent
from harness_run.testing import ScriptedModel, shell, text

from ._harnesses import HARNESS, HARNESSES
from ._helpers import model_secrets, processes_with, wait_until
from .conftest import EngineFactory

pytestmark = pytest.mark.harness


async def test_a_steer_is_delivered_once_per_message_id(
    model: ScriptedModel, make_engine: EngineFactory
) -> None:
    claude = HARNESS["claude-code"]
    marker, command = claude.long_command(2)
    model.add(shell(command), text("saw the steers"), text("spare answer"))
    session = claude.engine(make_engine).start_session()
    run = session.run("start working", secrets=model_secrets(model), message_id="prompt-1")
    await wait_until(lambda: processes_with(marker), within=30.0, what="the tool to start")

    assert session.send("STEER: mention zebras", message_id="m-1") is run
    assert session.send("STEER: mention zebras", message_id="m-1") is run  # a retry: same id
    assert await run.steer("STEER: mention zebras", "m-1")  # delivered (once), says so again
    assert await run.steer("start working", "prompt-1")  # the prompt's own id: already there
    assert await run.steer("STEER: and lions", "m-2")
    result = await run

    assert not result.is_error, result.error
    users = [(e.text, e.message_id) for e in run.events if isinstance(e, UserEvent)]
    assert users == [
        ("start working", "prompt-1"),
        ("STEER: mention zebras", "m-1"),
        ("STEER: and lions", "m-2"),
    ]
    delivered = model.main_requests[1].text
    assert delivered.count("STEER: mention zebras") == 1
    assert "STEER: and lions" in delivered
    assert result.text == "saw the steers"
    stored = [(e.text, e.message_id) for e in session.events(1) if isinstance(e, UserEvent)]
    assert stored == users
    assert session.history()[0].steers == ["STEER: mention zebras", "STEER: and lions"]
    # retries of delivered messages (e.g. a client that lost the answer) return that turn, start nothing
    assert session.send("STEER: mention zebras", message_id="m-1") is run
    assert session.run("start working", message_id="prompt-1") is run
    assert session.record.turns == 1
    # the turn is over: a steer now is not delivered, and send() starts the next turn
    assert not await run.steer("too late", "m-3")
    after = await session.send("next", secrets=model_secrets(model), message_id="m-3")
    assert after.turn == 2


@pytest.mark.parametrize("name", HARNESSES)
async def test_interrupt_keeps_accounting_and_the_next_send_resumes(
    model: ScriptedModel, make_engine: EngineFactory, name: str
) -> None:
    harness = HARNESS[name]
    marker, command = harness.long_command(30)
    # a finished step, then a long one: OpenCode reports a step's usage only once its tools are done
    model.add(
        shell("echo warmed up", usage={"input_tokens": 40, "output_tokens": 4}),
        shell(command, usage={"input_tokens": 50, "output_tokens": 5}),
        text("never reached"),
    )
    session = harness.engine(make_engine).start_session()
    secrets = harness.secrets(model)
    run = session.run("FIRST-PROMPT-7731: run the long command", secrets=secrets)
    await wait_until(lambda: processes_with(marker), within=60.0, what="the long command to start")

    if name != "claude-code":  # no steering into `codex exec` / `opencode run`: refused, named
        with pytest.raises(UsageError) as refused:
            session.send("change of plan", message_id="m-1")
        message = str(refused.value)
        assert harness.label in message
        assert "session.interrupt()" in message
        assert "session.send" in message
        assert session.status == "running"  # nothing happened to the turn

    await session.interrupt()
    result = await run
    assert (result.stop_reason, result.is_error) == ("interrupted", False)
    assert result.usage.input_tokens >= 40  # the model calls made before the stop are counted
    assert result.num_turns >= 1
    assert result.cost_usd is not None
    for _ in range(40):
        if not processes_with(marker):
            break
        await asyncio.sleep(0.05)
    assert processes_with(marker) == {}

    model.script.clear()
    model.add(text("resumed fine"))
    after = await session.send("SECOND-PROMPT: where were we?", secrets=secrets)
    assert not after.is_error, after.error
    assert after.text == "resumed fine"
    assert after.turn == 2
    last = model.main_requests[-1]
    assert "FIRST-PROMPT-7731" in last.text  # the conversation carried over
    assert "SECOND-PROMPT" in last.text
    assert [t.result.stop_reason for t in session.history() if t.result] == ["interrupted", "completed"]


async def test_exec_between_and_during_turns_times_out_with_124_and_caps_output(
    model: ScriptedModel, make_engine: EngineFactory
) -> None:
    claude = HARNESS["claude-code"]
    engine = claude.engine(make_engine, secrets=[Secret("TOOL_TOKEN", required=False)])
    session = engine.start_session()

    # between turns (before the first one, even): runs in the workspace
    done = await session.exec("pwd; echo err >&2; exit 3")
    assert (done.exit_code, done.stderr, done.truncated) == (3, "err\n", False)
    assert done.stdout.strip().endswith("/workspace")

    # timeout: exit code 124, no exception, what it printed before is kept, nothing left running
    marker = f"sleep 31.{uuid.uuid4().int % 10**6:06d}"  # unique: other test runs share the machine
    started = asyncio.get_running_loop().time()
    slow = await session.exec(f"echo before; {marker}; echo after", timeout=1)
    assert asyncio.get_running_loop().time() - started < 10
    assert (slow.exit_code, slow.stdout, slow.truncated) == (124, "before\n", False)
    await wait_until(lambda: not processes_with(marker), within=30, what="the command to be killed")

    # the output cap, per stream
    big = await session.exec("head -c 3000000 /dev/zero | tr '\\0' x; echo small >&2", max_output=1000)
    assert (big.exit_code, len(big.stdout), big.stderr, big.truncated) == (0, 1000, "small\n", True)
    default = await session.exec("head -c 1200000 /dev/zero | tr '\\0' y")
    assert (len(default.stdout), default.truncated) == (1024 * 1024, True)

    # secrets given to exec reach the command and are blanked in what comes back
    shown = await session.exec('echo "t=$TOOL_TOKEN"', secrets={"TOOL_TOKEN": "tool-token-value-123"})
    assert shown.stdout == "t=***\n"
    with pytest.raises(UsageError, match="not declared"):
        await session.exec("true", secrets={"UNDECLARED": "x"})

    # during a turn
    marker2, command = claude.long_command(3)
    model.add(shell(command), text("done"))
    run = session.run("work", secrets=model_secrets(model))
    await wait_until(lambda: processes_with(marker2), within=30.0, what="the tool to start")
    during = await session.exec("echo alongside; ls", timeout=5)
    assert during.exit_code == 0
    assert during.stdout.startswith("alongside\n")
    assert session.status == "running"
    assert not (await run).is_error
