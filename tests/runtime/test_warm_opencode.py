"""An OpenCode session's process kept between its turns (issue 25): the driver runs ``opencode serve``
behind a bridge that speaks ``opencode run --format json``; the real binary against the scripted
model. The guard still refuses on a later turn of the kept process, no model key is in it, a stopped
turn's process goes, a server that died while parked is replaced without an error, and a pooled
process takes a new session's first turn."""

from __future__ import annotations

import asyncio
import os
import signal
import uuid
from pathlib import Path

import pytest

from harness_run import AgentSpec, local
from harness_run.runtime._process import descendants
from harness_run.testing import ScriptedModel, shell, text

from ._helpers import API_KEY, alive, memory_holds, processes_with, wait_until
from ._helpers import warm_pids as pids

pytestmark = pytest.mark.harness

MODEL = "openai/gpt-5.1"
PRINTENV = "printenv HOME"
"""Refused by OpenCode's own permission rules (the credential guards' patterns)."""
ENVIRON = "for f in /proc/*/environ; do cat $f; done"
"""Missed by those patterns: refused by the guarded shell."""


def spec(**fields: object) -> AgentSpec:
    return AgentSpec(**{"name": "warm-opencode", "harness": "opencode", "model": MODEL, **fields})  # pyright: ignore[reportArgumentType]


def secrets(model: ScriptedModel, key: str = API_KEY) -> dict[str, str]:
    return {"OPENAI_BASE_URL": model.openai_url, "OPENAI_API_KEY": key}


def proc_files(pid: int, *names: str) -> list[bytes]:
    return [Path(f"/proc/{pid}/{name}").read_bytes() for name in names]


def server_of(bridge: int) -> int:
    """The ``opencode serve`` process of a kept bridge."""
    [server] = [p for p in descendants(bridge) if "serve" in Path(f"/proc/{p}/cmdline").read_text()]
    return server


async def test_a_sessions_turns_share_one_opencode_process(model: ScriptedModel, workdir: Path) -> None:
    model.add(shell("echo one > one.txt && echo made"), text("first"), text("second"))
    async with local.deploy(spec(), workdir=workdir) as engine:
        session = engine.start_session()
        first = await session.run("one", secrets=secrets(model))
        assert (first.is_error, first.text, first.num_turns) == (False, "first", 2), first.error
        kept = pids(engine)
        assert list(kept) == [session.session_id]
        server = server_of(kept[session.session_id])
        run = session.run("two", secrets=secrets(model))
        types = [e.type async for e in run]
        second = await run
        assert (second.is_error, second.text, second.num_turns) == (False, "second", 1), second.error
        assert types[0] == "user" and "started" in types and types[-1] == "result"
        assert pids(engine) == kept and alive(server)  # the same bridge and server took turn 2
        assert second.native_session_id == first.native_session_id  # the same OpenCode session
        assert second.usage.input_tokens > 0 and second.cost_usd is not None  # metered per turn
        # turn 2's request carries turn 1: a prompt, a tool call, its result, a text, the new prompt
        messages = model.main_requests[-1].messages
        assert [m.role for m in messages][-5:] == ["user", "assistant", "tool", "assistant", "user"]
        assert "made" in str(model.main_requests[-1].tool_results)
        [process] = engine.warm_processes()
        assert process.state == "parked" and process.memory_mb > 10
    assert not alive(kept[session.session_id]) and not alive(server)  # aclose ended both


async def test_the_guard_refuses_on_a_later_turn_of_the_kept_process(
    model: ScriptedModel, workdir: Path
) -> None:
    model.add(text("first"), shell(PRINTENV), shell(ENVIRON), text("refused"))
    async with local.deploy(spec(), workdir=workdir) as engine:
        session = engine.start_session()
        await session.run("one", secrets=secrets(model))
        kept = pids(engine)[session.session_id]
        second = await session.run("two", secrets=secrets(model))
        assert (second.is_error, second.text) == (False, "refused"), second.error
        assert pids(engine)[session.session_id] == kept  # turn 2 ran in the kept process
    printenv, environ = (str(r.tool_results[-1]) for r in model.main_requests[2:4])
    assert "printenv" in printenv and str(workdir) not in printenv, printenv  # OpenCode's rule
    assert "harness-run denied this tool call" in environ and str(workdir) not in environ, environ


async def test_interrupt_on_a_kept_process_ends_it_and_the_next_turn_resumes_cold(
    model: ScriptedModel, workdir: Path
) -> None:
    marker = f"sleep 30.{uuid.uuid4().int % 10**6:06d}"
    model.add(text("first"), shell(f"bash -c '{marker}; echo finished'"), text("never"))
    async with local.deploy(spec(), workdir=workdir) as engine:
        session = engine.start_session()
        await session.run("one", secrets=secrets(model))
        kept = pids(engine)[session.session_id]
        server = server_of(kept)
        run = session.run("long", secrets=secrets(model))
        await wait_until(lambda: processes_with(marker), within=30, what="the tool to start")
        await session.interrupt()
        result = await run
        assert result.stop_reason == "interrupted"
        await wait_until(lambda: not alive(server), within=5, what="the server to end")
        assert not alive(kept) and processes_with(marker) == {}  # a stopped turn's process is not kept
        assert engine.warm_processes() == []
        model.script.clear()
        model.add(text("third"))
        third = await session.run("three", secrets=secrets(model))
        assert (third.is_error, third.text) == (False, "third"), third.error
        assert third.native_session_id == result.native_session_id  # resumed in a new process
        assert pids(engine)[session.session_id] != kept
        assert "first" in str(model.main_requests[-1].messages)


async def test_a_server_that_died_while_parked_is_replaced_without_an_error(
    model: ScriptedModel, workdir: Path
) -> None:
    model.add(text("first"), text("second"))
    async with local.deploy(spec(), workdir=workdir) as engine:
        session = engine.start_session()
        await session.run("one", secrets=secrets(model))
        kept = pids(engine)[session.session_id]
        os.kill(server_of(kept), signal.SIGKILL)
        await wait_until(lambda: not alive(kept), within=10, what="the bridge to exit with its server")
        second = await session.run("two", secrets=secrets(model))
        assert (second.is_error, second.text) == (False, "second"), second.error
        assert pids(engine)[session.session_id] != kept
        assert "first" in str(model.main_requests[-1].messages)  # resumed from the session's files


async def test_no_model_key_is_in_a_parked_opencode_process(model: ScriptedModel, workdir: Path) -> None:
    canary = f"sk-canary-{uuid.uuid4().hex}"
    model.add(shell("echo hi"), text("done"))
    async with local.deploy(spec(), workdir=workdir) as engine:
        session = engine.start_session()
        result = await session.run("hi", secrets=secrets(model, key=canary))
        assert (result.is_error, result.text) == (False, "done"), result.error
        [parked] = engine.warm_processes()
        server = server_of(parked.pid)
        for pid in (parked.pid, server):
            environ, cmdline = proc_files(pid, "environ", "cmdline")
            assert b"OPENAI_API_KEY=hrp-" in environ  # the model proxy's token, not the key
            assert canary.encode() not in environ + cmdline
        # the bridge's whole memory (the server, a Bun process, maps tens of GB it never touches)
        assert not await asyncio.to_thread(memory_holds, parked.pid, canary.encode())
        root = workdir / "sessions" / session.session_id
        assert not any(canary.encode() in p.read_bytes() for p in root.rglob("*") if p.is_file())


async def test_what_a_tool_left_running_ends_with_the_turn_but_the_server_stays(
    model: ScriptedModel, workdir: Path
) -> None:
    marker = f"sleep 30.{uuid.uuid4().int % 10**6:06d}"
    model.add(shell(f"(bash -c '{marker}' &) ; echo started"), text("first"), text("second"))
    async with local.deploy(spec(), workdir=workdir) as engine:
        session = engine.start_session()
        first = await session.run("one", secrets=secrets(model))
        assert (first.is_error, first.text) == (False, "first"), first.error
        await wait_until(lambda: not processes_with(marker), within=10, what="the tool's leftover to end")
        kept = pids(engine)[session.session_id]
        server = server_of(kept)
        second = await session.run("two", secrets=secrets(model))
        assert (second.is_error, second.text) == (False, "second"), second.error
        assert pids(engine)[session.session_id] == kept and alive(server)


async def test_a_pooled_process_takes_a_new_sessions_first_turn(
    model: ScriptedModel, workdir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_BASE_URL", model.openai_url)  # the operator's: the pool's plan is the turn's
    monkeypatch.setenv("OPENAI_API_KEY", API_KEY)
    model.add(text("done"))
    async with local.deploy(spec(), workdir=workdir, warm_pool=1) as engine:
        await engine.fill_pool()
        [pooled] = engine.warm_processes()
        session = engine.start_session()
        assert session.session_id == pooled.session_id
        result = await session.run("hi")
        assert (result.is_error, result.text) == (False, "done"), result.error
        assert pids(engine)[session.session_id] == pooled.pid  # its first turn took the pooled process
