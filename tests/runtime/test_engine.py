"""The Engine protocol on the local runtimes: one type for every engine, and closing it (``with``,
``async with``, ``aclose``/``close``) stops this process's running turns and releases the engine's
resources, while the durable history stays for the next engine."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from harness_run import AgentSpec, Engine, Run, RunResult, Session, UsageError, local
from harness_run.runtime.container import engine_for, share_store
from harness_run.store import EngineRecord
from harness_run.testing import ScriptedModel, shell, text

from ._helpers import MODEL, model_secrets, processes_with, wait_until
from .test_stop import assert_no_leftovers, long_command


def spec(**fields: object) -> AgentSpec:
    return AgentSpec(name="eng", harness="claude-code", model=MODEL, **fields)  # type: ignore[arg-type]


def open_handles(path: Path) -> list[str]:
    """This process's open file descriptors on ``path`` (or on files next to it with its name)."""
    found: list[str] = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if target.startswith(str(path)):
            found.append(target)
    return found


def test_the_top_level_names_are_the_runtime_types_and_import_lightly() -> None:
    from harness_run import events, runtime

    assert (Engine, Session, Run, RunResult) == (
        runtime.Engine,
        runtime.Session,
        runtime.Run,
        events.RunResult,
    )
    code = "import sys, harness_run\nprint('harness_run.runtime' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"  # loaded on first use of Engine/Session/Run only


def test_local_and_container_engines_are_engines(tmp_path: Path) -> None:
    engine = local.deploy(spec(), workdir=tmp_path)
    assert isinstance(engine, Engine)
    assert isinstance(engine.start_session(), Session)
    engine.close()
    # a recorded container version, as local.get_engine() re-creates it (nothing touches Docker
    # until a session runs)
    record = EngineRecord(name="eng", version="f" * 64, spec=spec().to_dict(), runtime="container")
    container = engine_for(record, share_store(tmp_path / "ctr"), None)
    assert isinstance(container, Engine)
    assert (container.name, container.version) == ("eng", "f" * 64)
    container.close()
    assert not isinstance(object(), Engine)


def test_a_with_block_closes_the_engine_and_keeps_the_history(tmp_path: Path) -> None:
    db = tmp_path / "history.sqlite3"
    with local.deploy(spec(), workdir=tmp_path) as engine:
        session = engine.start_session()
        assert [r.session_id for r in engine.list_sessions()] == [session.session_id]
        assert [v.version for v in engine.versions()] == [engine.version]
        assert open_handles(db)  # the engine holds its history store open
    assert open_handles(db) == []  # released when the block ended
    with pytest.raises(UsageError, match=r"engine 'eng' is closed; get it again"):
        engine.start_session()
    with pytest.raises(UsageError, match="closed"):
        engine.get_session(session.session_id)
    with pytest.raises(UsageError, match=rf"the engine of session {session.session_id} is closed"):
        session.history()
    engine.close()  # again: nothing more to do
    with local.get_engine("eng", workdir=tmp_path) as again:  # the history stays
        reattached = again.get_session(session.session_id)
        assert (reattached.record.turns, reattached.status) == (0, "idle")
    assert open_handles(db) == []


@pytest.mark.harness
async def test_async_with_stops_a_running_turn_and_stores_it(model: ScriptedModel, workdir: Path) -> None:
    marker, command = long_command(30)
    model.add(shell(command), text("never reached"))
    async with local.deploy(spec(), workdir=workdir) as engine:
        session = engine.start_session()
        run = session.run("run the long command", secrets=model_secrets(model))
        await wait_until(lambda: processes_with(marker), within=30.0, what="the sleep command to start")
        started = time.monotonic()
    assert time.monotonic() - started < 15  # interrupted, not waited for
    assert run.done
    result = await run
    assert (result.stop_reason, result.is_error) == ("interrupted", False)
    await assert_no_leftovers(marker)
    assert open_handles(workdir / "history.sqlite3") == []
    async with local.get_engine("eng", workdir=workdir) as again:  # the turn was stored first
        reattached = again.get_session(session.session_id)
        assert reattached.record.turns == 1
        assert [t.result.stop_reason for t in reattached.history() if t.result] == ["interrupted"]
        model.script.clear()
        model.add(text("back again"))
        after = await reattached.run("are you there?", secrets=model_secrets(model))
        assert (after.text, after.turn) == ("back again", 2)


@pytest.mark.harness
async def test_a_plain_with_block_in_async_code_stops_the_turn_too(
    model: ScriptedModel, workdir: Path
) -> None:
    marker, command = long_command(30)
    model.add(shell(command), text("never reached"))
    with local.deploy(spec(), workdir=workdir) as engine:
        session = engine.start_session()
        run = session.run("run the long command", secrets=model_secrets(model))
        await wait_until(lambda: processes_with(marker), within=30.0, what="the sleep command to start")
    # the block cannot wait inside a running loop: the turn is being stopped, aclose() waits for it
    with pytest.raises(UsageError, match="closed"):
        session.run("another turn", secrets=model_secrets(model))
    await engine.aclose()
    assert run.done
    assert (await run).stop_reason == "interrupted"
    assert session.record.turns == 1 and session.stop_reason == "interrupted"
    await assert_no_leftovers(marker)
    assert open_handles(workdir / "history.sqlite3") == []
