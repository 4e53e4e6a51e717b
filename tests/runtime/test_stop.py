"""Turns stopped mid-way (interrupt, a cancelled await, the turn timeout) leave no process behind and
the session usable; a busy session refuses a second turn and takes a steer instead."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

import pytest

from harness_run import local
from harness_run.errors import SessionBusyError
from harness_run.events import ToolUseEvent, UserEvent
from harness_run.runtime.local import LocalEngine
from harness_run.testing import ScriptedModel, shell, text

from ._helpers import claude_descendants, model_secrets, processes_with, wait_until
from .conftest import EngineFactory

pytestmark = pytest.mark.harness


def long_command(seconds: int) -> tuple[str, str]:
    """A shell command sleeping ``seconds`` (plus a unique fraction) and its unique ``sleep`` marker.

    Claude Code refuses a standalone ``sleep N`` tool call, hence the ``bash -c`` wrapper; the marker
    is in the command line of both the wrapper and the ``sleep`` process, wherever they get re-parented.
    """
    marker = f"sleep {seconds}.{uuid.uuid4().int % 10**6:06d}"
    return marker, f"bash -c '{marker}; echo finished'"


async def assert_no_leftovers(marker: str, *engines: LocalEngine) -> None:
    """Neither the long command nor any claude process under this test process is alive, but the
    ones ``engines`` keep for their sessions' next turns (reported by ``warm_processes()``)."""
    kept = {w.pid for engine in engines for w in engine.warm_processes()}

    def stray() -> dict[int, str]:
        return {pid: cmd for pid, cmd in claude_descendants().items() if pid not in kept}

    for _ in range(60):  # processes being stopped get a moment
        if not processes_with(marker) and not stray():
            break
        await asyncio.sleep(0.05)
    assert processes_with(marker) == {}
    assert stray() == {}


@pytest.mark.parametrize("how", ["interrupt", "cancel", "timeout"])
async def test_a_turn_stopped_mid_way_leaves_no_orphans_and_the_session_usable(
    model: ScriptedModel,
    make_engine: EngineFactory,
    how: str,
) -> None:
    marker, command = long_command(30)
    model.add(shell(command), text("never reached"))
    engine = make_engine(timeout=8) if how == "timeout" else make_engine()  # the spec's turn timeout
    session = engine.start_session()
    run = session.run("run the long command", secrets=model_secrets(model))
    await wait_until(lambda: processes_with(marker), within=30.0, what="the sleep command to start")
    assert session.status == "running"

    if how == "interrupt":
        await session.interrupt()
        result = await run
        assert result.stop_reason == "interrupted"
        assert not result.is_error  # the user stopped it: not a failure
        assert result.error == "the turn was interrupted"
    elif how == "cancel":
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(run, 0.2)
        result = run.result
        assert result is not None
        assert result.stop_reason == "cancelled"
        assert not result.is_error
    else:
        result = await run
        assert result.stop_reason == "timeout"
        assert result.is_error
        assert "timed out after 8 s" in (result.error or "")
    assert any(isinstance(e, ToolUseEvent) and marker in e.input.get("command", "") for e in run.events)
    assert run.events[-1].type == "result"
    # accounting is kept: the model call made before the stop is counted, and priced from the table
    # (the CLI never reported its own figure for the turn)
    assert result.usage.input_tokens > 0
    assert result.num_turns == 1
    assert result.cost_usd is not None
    assert result.cost_usd > 0
    await assert_no_leftovers(marker)

    # the session stays usable: the next turn runs and completes
    model.script.clear()
    model.add(text("back to normal"))
    after = await session.run("are you there?", secrets=model_secrets(model))
    assert not after.is_error, after.error
    assert after.text == "back to normal"
    assert after.turn == 2
    assert [t.result.stop_reason for t in session.history() if t.result] == [result.stop_reason, "completed"]
    assert [w.session_id for w in engine.warm_processes()] == [session.session_id]  # kept for turn 3
    await assert_no_leftovers(marker, engine)


async def test_close_with_kill_ends_running_turns_at_once_and_the_history_keeps_them(
    model: ScriptedModel, make_engine: EngineFactory, workdir: Path
) -> None:
    """``engine.aclose(kill=True)``: a turn whose tool ignores SIGTERM is killed with everything it
    started — nothing of it is alive when ``aclose`` returns — and is stored as interrupted."""
    marker = f"sleep 30.{uuid.uuid4().int % 10**6:06d}"
    model.add(shell(f"bash -c 'trap \"\" TERM; {marker}; echo finished'"), text("never reached"))
    engine = make_engine()
    session = engine.start_session()
    run = session.run("run the stubborn command", secrets=model_secrets(model))
    await wait_until(lambda: processes_with(marker), within=30.0, what="the sleep command to start")
    await engine.aclose(kill=True)
    assert processes_with(marker) == {}  # at once: no polling
    assert claude_descendants() == {}
    assert engine.closed and run.result is not None and run.result.stop_reason == "interrupted"
    with local.get_engine("rt", workdir=workdir) as again:
        (turn,) = again.get_session(session.session_id).history()
        assert turn.result is not None and turn.result.stop_reason == "interrupted"
    await engine.aclose(kill=True)  # again: nothing more


async def test_run_while_busy_raises_and_send_steers_the_running_turn(
    model: ScriptedModel,
    make_engine: EngineFactory,
) -> None:
    marker, command = long_command(2)
    model.add(shell(command), text("saw the steer"), text("spare answer"))
    engine = make_engine()
    session = engine.start_session()
    run = session.run("start working", secrets=model_secrets(model))
    await wait_until(lambda: processes_with(marker), within=30.0, what="the tool to start")

    with pytest.raises(SessionBusyError, match="still running turn 1"):
        session.run("another turn", secrets=model_secrets(model))
    steered = session.send("STEER: also mention zebras")
    assert steered is run
    result = await run

    assert not result.is_error, result.error
    users = [e.text for e in run.events if isinstance(e, UserEvent)]
    assert users == ["start working", "STEER: also mention zebras"]
    # Claude Code hands the steer to the model within the same turn, next to the running tool's result
    assert result.text == "saw the steer"
    assert model.remaining == 1  # one turn, one result: no extra turn for the steer
    second = model.main_requests[1]
    assert (
        "The user sent a new message while you were working:\nSTEER: also mention zebras"
        in (second.tool_results[-1])
    )
    assert session.history()[0].steers == ["STEER: also mention zebras"]
    await assert_no_leftovers(marker, engine)
