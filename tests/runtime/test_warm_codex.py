"""A Codex session's process kept between its turns (issue 25): the driver runs ``codex app-server``
behind a bridge that speaks ``codex exec --json``; the real binary against the scripted model.

The guard is the point: app-server skips a hook it counts as untrusted (ours) unless every thread
asks for ``bypass_hook_trust``, so a forbidden command is refused on the first turn and on a later
turn of the kept process alike."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

import pytest

from harness_run import AgentSpec, local
from harness_run.runtime._process import descendants
from harness_run.testing import ScriptedModel, shell, text

from ._helpers import API_KEY, alive, memory_holds, processes_with, wait_until
from ._helpers import warm_pids as pids

pytestmark = pytest.mark.harness

MODEL = "gpt-5.6-luna"
FORBIDDEN = "sh -c 'printenv HOME'"
"""A command the credential guard refuses (Codex has no pattern list of its own to stop it)."""


def spec(**fields: object) -> AgentSpec:
    return AgentSpec(**{"name": "warm-codex", "harness": "codex", "model": MODEL, **fields})  # pyright: ignore[reportArgumentType]


def secrets(model: ScriptedModel, key: str = API_KEY) -> dict[str, str]:
    return {"OPENAI_BASE_URL": model.openai_url, "OPENAI_API_KEY": key}


async def test_a_sessions_turns_share_one_codex_process(model: ScriptedModel, workdir: Path) -> None:
    model.add(shell("echo one > one.txt && echo made"), text("first"), text("second"))
    async with local.deploy(spec(), workdir=workdir) as engine:
        session = engine.start_session()
        first = await session.run("one", secrets=secrets(model))
        assert (first.is_error, first.text, first.num_turns) == (False, "first", 2), first.error
        kept = pids(engine)
        assert list(kept) == [session.session_id]
        run = session.run("two", secrets=secrets(model))
        types = [e.type async for e in run]
        second = await run
        assert (second.is_error, second.text, second.num_turns) == (False, "second", 1), second.error
        assert types[0] == "user" and "started" in types and types[-1] == "result"
        assert pids(engine) == kept  # the same process took turn 2
        assert second.native_session_id == first.native_session_id  # the same Codex thread
        assert second.usage.input_tokens > 0 and second.cost_usd is not None
        # turn 2's request carries turn 1 (the thread is loaded in the process)
        assert "made" in str(model.main_requests[-1].json["input"])
        [process] = engine.warm_processes()
        assert process.state == "parked" and process.memory_mb > 10
    assert not alive(kept[session.session_id])


async def test_the_guard_refuses_on_the_first_turn_and_on_a_kept_process(
    model: ScriptedModel, workdir: Path
) -> None:
    model.add(shell(FORBIDDEN), text("refused once"), shell(FORBIDDEN), text("refused twice"))
    async with local.deploy(spec(), workdir=workdir) as engine:
        session = engine.start_session()
        first = await session.run("one", secrets=secrets(model))
        assert (first.is_error, first.text) == (False, "refused once"), first.error
        kept = pids(engine)[session.session_id]
        second = await session.run("two", secrets=secrets(model))
        assert (second.is_error, second.text) == (False, "refused twice"), second.error
        assert pids(engine)[session.session_id] == kept  # turn 2 ran in the kept process
    requests = model.main_requests
    assert len(requests) == 4
    for after_call in (requests[1], requests[3]):  # the hook ran and refused: HOME was never printed
        output = str(after_call.tool_results[-1])
        assert "harness-run denied this tool call" in output and str(workdir) not in output, output


async def test_interrupt_on_a_kept_process_ends_it_and_the_next_turn_resumes_cold(
    model: ScriptedModel, workdir: Path
) -> None:
    marker = f"sleep 30.{uuid.uuid4().int % 10**6:06d}"
    model.add(text("first"), shell(f"bash -c '{marker}; echo finished'"), text("never"))
    async with local.deploy(spec(), workdir=workdir) as engine:
        session = engine.start_session()
        await session.run("one", secrets=secrets(model))
        kept = pids(engine)[session.session_id]
        run = session.run("long", secrets=secrets(model))
        await wait_until(lambda: processes_with(marker), within=30, what="the tool to start")
        await session.interrupt()
        result = await run
        assert result.stop_reason == "interrupted"
        assert not alive(kept) and processes_with(marker) == {}  # a stopped turn's process is not kept
        assert engine.warm_processes() == []
        model.script.clear()
        model.add(text("third"))
        third = await session.run("three", secrets=secrets(model))
        assert (third.is_error, third.text) == (False, "third"), third.error
        assert third.native_session_id == result.native_session_id  # the thread, resumed in a new process
        assert pids(engine)[session.session_id] != kept
        assert "first" in str(model.main_requests[-1].json["input"])


async def test_a_pooled_codex_process_takes_the_first_turn_and_no_key_is_in_any(
    model: ScriptedModel, workdir: Path
) -> None:
    canary = f"sk-canary-{uuid.uuid4().hex}"
    model.add(shell("echo hi"), text("done"))
    async with local.deploy(spec(), workdir=workdir, warm_pool=1) as engine:
        await engine.fill_pool()
        [pooled] = engine.warm_processes()
        session = engine.start_session()
        assert session.session_id == pooled.session_id
        result = await session.run("hi", secrets=secrets(model, key=canary))  # the key: per turn only
        assert (result.is_error, result.text) == (False, "done"), result.error
        assert pids(engine)[session.session_id] == pooled.pid  # its first turn took the pooled process
        await engine.fill_pool()  # refilled
        assert {w.state for w in engine.warm_processes()} == {"parked", "pooled"}
        for process in engine.warm_processes():
            tree = [process.pid, *descendants(process.pid)]
            assert len(tree) >= 2  # the bridge and its app-server
            for pid in tree:
                assert not await asyncio.to_thread(memory_holds, pid, canary.encode()), (process, pid)


async def test_what_a_tool_left_running_ends_with_the_turn_but_app_server_stays(
    model: ScriptedModel, workdir: Path
) -> None:
    marker = f"sleep 30.{uuid.uuid4().int % 10**6:06d}"
    model.add(shell(f"setsid -f bash -c '{marker}' ; echo started"), text("first"), text("second"))
    async with local.deploy(spec(), workdir=workdir) as engine:
        session = engine.start_session()
        first = await session.run("one", secrets=secrets(model))
        assert (first.is_error, first.text) == (False, "first"), first.error
        await wait_until(lambda: not processes_with(marker), within=10, what="the tool's leftover to end")
        kept = pids(engine)[session.session_id]
        assert len(descendants(kept)) >= 1  # its app-server is still there
        second = await session.run("two", secrets=secrets(model))
        assert (second.is_error, second.text) == (False, "second"), second.error
        assert pids(engine)[session.session_id] == kept
