"""Warm harness processes (issue 25): a session's Claude Code process is kept between its turns and a
warm pool starts processes before their sessions exist; no secret is ever in a kept process, and
interrupt, steer, exec, budgets, re-attach, a crash while parked and closing all still hold."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import textwrap
import uuid
from pathlib import Path

import pytest

from harness_run import AgentSpec, Secret, TurnConfig, local
from harness_run.testing import ScriptedModel, shell, text

from ._helpers import API_KEY, MODEL, alive, memory_holds, model_secrets, processes_with, wait_until
from ._helpers import warm_pids as pids

pytestmark = pytest.mark.harness


def spec(**fields: object) -> AgentSpec:
    return AgentSpec(**{"name": "warm", "harness": "claude-code", "model": MODEL, **fields})  # pyright: ignore[reportArgumentType]


async def test_a_sessions_next_turn_is_written_to_the_same_process(
    model: ScriptedModel, workdir: Path
) -> None:
    model.add(shell("echo one > one.txt"), text("first"), text("second"), text("third"))
    async with local.deploy(spec(), workdir=workdir) as engine:
        session = engine.start_session()
        first = await session.run("one", secrets=model_secrets(model))
        kept = pids(engine)
        assert list(kept) == [session.session_id]
        run = session.run("two", secrets=model_secrets(model))
        types = [e.type async for e in run]
        second = await run
        assert (first.text, second.text) == ("first", "second")
        assert types[0] == "user" and "started" in types and types[-1] == "result"
        assert pids(engine) == kept  # the same process took turn 2
        assert second.usage.input_tokens > 0 and second.cost_usd is not None  # metered per turn
        # the process kept the conversation: turn 2's request carries turn 1
        messages = model.main_requests[-1].messages  # turn 1: a prompt, a tool call, its result, a text
        assert [m.role for m in messages] == ["user", "assistant", "user", "assistant", "user"]
        assert [t.turn for t in session.history()] == [1, 2]
        [process] = engine.warm_processes()
        assert process.state == "parked" and process.memory_mb > 10
    assert not alive(kept[session.session_id])  # aclose ended it


async def test_no_secret_is_in_a_parked_or_pooled_process(
    model: ScriptedModel, workdir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    canary = f"sk-canary-{uuid.uuid4().hex}"
    monkeypatch.setenv("ANTHROPIC_API_KEY", canary)  # the operator's key: the pool's processes see none
    monkeypatch.setenv("ANTHROPIC_BASE_URL", model.url)
    model.add(text("done"), text("again"))
    async with local.deploy(spec(), workdir=workdir, warm_pool=1) as engine:
        await engine.fill_pool()
        [pooled] = engine.warm_processes()
        assert pooled.state == "pooled"
        session = engine.start_session()
        assert session.session_id == pooled.session_id  # the pooled process's id is the session's
        result = await session.run(
            "hi", secrets={"ANTHROPIC_API_KEY": canary, "ANTHROPIC_BASE_URL": model.url}
        )
        assert result.text == "done"
        assert pids(engine)[session.session_id] == pooled.pid  # its first turn took the pooled process
        await engine.fill_pool()  # refilled
        assert {w.state for w in engine.warm_processes()} == {"parked", "pooled"}
        for process in engine.warm_processes():
            assert not memory_holds(process.pid, canary.encode()), process
        root = workdir / "sessions" / session.session_id
        assert not any(canary.encode() in p.read_bytes() for p in root.rglob("*") if p.is_file())


async def test_a_process_holding_a_secret_is_not_kept(model: ScriptedModel, workdir: Path) -> None:
    model.add(text("done"))
    async with local.deploy(spec(secrets=[Secret("DEPLOY_TOKEN")]), workdir=workdir) as engine:
        session = engine.start_session()
        result = await session.run("hi", secrets=model_secrets(model, DEPLOY_TOKEN=f"tok-{uuid.uuid4().hex}"))
        assert result.text == "done"
        assert engine.warm_processes() == []  # the agent's shell has the token: the process ended


async def test_other_settings_get_a_fresh_process_and_the_warm_one_stops(
    model: ScriptedModel, workdir: Path
) -> None:
    model.add(text("first"), text("second"))
    async with local.deploy(spec(), workdir=workdir) as engine:
        session = engine.start_session()
        await session.run("one", secrets=model_secrets(model))
        before = pids(engine)[session.session_id]
        second = await session.run("two", secrets=model_secrets(model), config=TurnConfig(max_turns=7))
        assert second.text == "second"
        after = pids(engine)[session.session_id]
        assert after != before and not alive(before)
        cmdline = await asyncio.to_thread(Path(f"/proc/{after}/cmdline").read_bytes)
        assert b"--max-turns\x007" in cmdline


async def test_a_harness_that_died_while_parked_is_replaced_without_an_error(
    model: ScriptedModel, workdir: Path
) -> None:
    model.add(text("first"), text("second"))
    async with local.deploy(spec(), workdir=workdir) as engine:
        session = engine.start_session()
        await session.run("one", secrets=model_secrets(model))
        dead = pids(engine)[session.session_id]
        os.kill(dead, signal.SIGKILL)
        await wait_until(lambda: not alive(dead), within=10, what="the parked CLI to die")
        second = await session.run("two", secrets=model_secrets(model))
        assert (second.is_error, second.text) == (False, "second")
        assert pids(engine)[session.session_id] != dead
        assert len(model.main_requests[-1].messages) == 3  # resumed from the transcript: turn 1 is there


async def test_idle_ttl_and_the_cap_on_parked_processes(model: ScriptedModel, workdir: Path) -> None:
    model.add(text("a"), text("b"), text("c"))
    async with local.deploy(spec(), workdir=workdir, idle_ttl=1.0, max_idle_processes=1) as engine:
        first, second = engine.start_session(), engine.start_session()
        await first.run("one", secrets=model_secrets(model))
        old = pids(engine)[first.session_id]
        await second.run("two", secrets=model_secrets(model))
        assert list(pids(engine)) == [second.session_id]  # the least recently used went
        await wait_until(lambda: not alive(old), within=10, what="the evicted CLI to end")
        await wait_until(lambda: not engine.warm_processes(), within=10, what="idle_ttl to end the other")
    async with local.deploy(spec(name="cold"), workdir=workdir, idle_ttl=0) as engine:
        await engine.start_session().run("three", secrets=model_secrets(model))
        assert engine.warm_processes() == []


@pytest.mark.parametrize(
    ("field", "value"), [("idle_ttl", -1), ("max_idle_processes", -2), ("warm_pool", 1.5)]
)
def test_bad_warm_settings_name_the_field(workdir: Path, field: str, value: object) -> None:
    with pytest.raises(Exception, match=field) as caught:
        local.deploy(spec(), workdir=workdir, **{field: value})  # pyright: ignore[reportArgumentType]
    assert type(caught.value).__name__ == "UsageError"


async def test_a_turn_run_elsewhere_meanwhile_makes_the_parked_process_stale(
    model: ScriptedModel, workdir: Path
) -> None:
    model.add(text("first"), text("second"), text("third"))
    async with local.deploy(spec(), workdir=workdir) as engine:
        session = engine.start_session()
        await session.run("one", secrets=model_secrets(model))
        stale = pids(engine)[session.session_id]
        async with local.get_engine("warm", workdir=workdir) as other:  # another process's engine
            again = other.get_session(session.session_id)
            assert (await again.run("two", secrets=model_secrets(model))).text == "second"
        session.refresh(engine.store.get_session(session.session_id))  # pyright: ignore[reportArgumentType]
        third = await session.run("three", secrets=model_secrets(model))
        assert third.text == "third" and third.turn == 3
        assert not alive(stale)
        assert len(model.main_requests[-1].messages) == 5  # turn 2, run elsewhere, is in the conversation


async def test_interrupt_steer_exec_and_budget_on_a_kept_process(model: ScriptedModel, workdir: Path) -> None:
    marker = f"sleep 30.{uuid.uuid4().int % 10**6:06d}"
    model.add(text("first"), shell(f"bash -c '{marker}; echo finished'"), text("never"))
    async with local.deploy(spec(), workdir=workdir) as engine:
        session = engine.start_session()
        await session.run("one", secrets=model_secrets(model))
        kept = pids(engine)[session.session_id]
        assert (await session.exec("echo from-exec")).stdout.strip() == "from-exec"  # between turns
        run = session.run("long", secrets=model_secrets(model))
        await wait_until(lambda: processes_with(marker), within=30, what="the tool to start")
        with pytest.raises(Exception, match="still running"):
            session.run("busy", secrets=model_secrets(model))
        await session.interrupt()
        result = await run
        assert result.stop_reason == "interrupted"
        assert not alive(kept) and processes_with(marker) == {}  # a stopped turn's process is not kept
        assert engine.warm_processes() == []
        model.script.clear()
        model.add(text("steered"), text("spare"))
        await session.run("three", secrets=model_secrets(model))  # cold, then kept
        steer_marker = f"sleep 2.{uuid.uuid4().int % 10**6:06d}"
        model.script.clear()
        model.add(shell(f"bash -c '{steer_marker}; echo ok'"), text("saw the steer"))
        run = session.run("four", secrets=model_secrets(model))
        await wait_until(lambda: processes_with(steer_marker), within=30, what="the tool to start")
        session.send("STEER: zebras")
        assert (await run).text == "saw the steer"
        assert "zebras" in str(model.main_requests[-1].tool_results)
        model.script.clear()
        model.add(shell("echo spend"), text("over"))
        over = await session.run(
            "five", secrets=model_secrets(model), config=TurnConfig(max_budget_usd=0.000001)
        )
        assert over.stop_reason == "max_budget"


async def test_a_client_that_dies_takes_its_parked_process_with_it(
    model: ScriptedModel, workdir: Path
) -> None:
    model.add(text("done"))
    script = textwrap.dedent(
        f"""
        import asyncio, os, signal
        from harness_run import AgentSpec, local
        async def main():
            engine = local.deploy(AgentSpec(name="warm", harness="claude-code", model={MODEL!r}), workdir={str(workdir)!r})
            session = engine.start_session()
            await session.run("hi", secrets={{"ANTHROPIC_BASE_URL": {model.url!r}, "ANTHROPIC_API_KEY": {API_KEY!r}}})
            print([w.pid for w in engine.warm_processes()][0], flush=True)
            os.kill(os.getpid(), signal.SIGKILL)
        asyncio.run(main())
        """
    )
    done = await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == -signal.SIGKILL, done.stderr
    parked = int(done.stdout.split()[0])
    await wait_until(lambda: not alive(parked), within=15, what="the reaper to end the parked CLI")


async def test_close_from_synchronous_code_ends_warm_processes(model: ScriptedModel, workdir: Path) -> None:
    model.add(text("done"))
    engine = local.deploy(spec(), workdir=workdir, warm_pool=1)
    await engine.fill_pool()
    session = engine.start_session()
    await session.run("hi", secrets=model_secrets(model))
    await engine.fill_pool()
    warm = list(pids(engine).values())
    assert len(warm) == 2
    engine.close()
    await wait_until(lambda: not any(alive(p) for p in warm), within=10, what="the warm CLIs to end")
    await asyncio.sleep(0.2)  # the pipes and proxies close in this loop
    # the pooled process's workspace went with it; the session's stays
    assert [p.name for p in (workdir / "sessions").iterdir()] == [session.session_id]


async def test_the_event_loop_ending_ends_warm_processes(model: ScriptedModel, workdir: Path) -> None:
    """``asyncio.run`` returning (no aclose) leaves no kept CLI behind."""
    model.add(text("done"))
    found: list[int] = []

    async def main() -> None:
        engine = local.deploy(spec(), workdir=workdir)
        await engine.start_session().run("hi", secrets=model_secrets(model))
        found.extend(pids(engine).values())

    await asyncio.to_thread(asyncio.run, main())
    assert found and not any(alive(p) for p in found)


async def test_a_parked_process_s_token_reaches_nothing_between_turns(
    model: ScriptedModel, workdir: Path
) -> None:
    """What the agent in a parked process could do between turns with what it holds: its proxy
    token is refused (the key was dropped at the turn's end), and bound again for the next turn."""
    import urllib.error
    import urllib.request

    model.add(text("first"), text("second"))
    async with local.deploy(spec(), workdir=workdir) as engine:
        session = engine.start_session()
        await session.run("one", secrets=model_secrets(model))
        [kept] = engine.warm_processes()
        env = dict(
            item.split(b"=", 1)
            for item in (await asyncio.to_thread(Path(f"/proc/{kept.pid}/environ").read_bytes)).split(b"\0")
            if b"=" in item
        )
        token, base = env[b"ANTHROPIC_API_KEY"].decode(), env[b"ANTHROPIC_BASE_URL"].decode()
        assert token.startswith("hrp-") and base.startswith("http://127.0.0.1:")
        request = urllib.request.Request(
            f"{base}/v1/messages",
            data=b"{}",
            headers={"x-api-key": token, "content-type": "application/json"},
        )
        with pytest.raises(urllib.error.HTTPError) as refused:
            await asyncio.to_thread(urllib.request.urlopen, request, timeout=5)
        assert refused.value.code == 401
        served = len(model.requests)
        second = await session.run("two", secrets=model_secrets(model))
        assert second.text == "second" and len(model.requests) > served  # the same token works in a turn
