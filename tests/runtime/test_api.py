"""The API as the README shows it: sync local.run, polling a Run, listing sessions and versions."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from harness_run import AgentSpec, UsageError, local
from harness_run.testing import ScriptedModel, text

from ._helpers import model_secrets
from .conftest import MODEL, EngineFactory

pytestmark = pytest.mark.harness


def test_local_run_from_synchronous_code(model: ScriptedModel, tmp_path: Path) -> None:
    model.add(text("sync answer"))
    spec = AgentSpec(name="sync-agent", harness="claude-code", model=MODEL)
    result = local.run(spec, "hello", secrets=model_secrets(model), workdir=tmp_path)
    assert result.text == "sync answer"
    assert not result.is_error
    # and the session is in the history of that workdir
    engine = local.get_engine("sync-agent", workdir=tmp_path)
    (record,) = engine.list_sessions()
    assert record.session_id == result.session_id
    assert record.turns == 1


def test_session_run_outside_an_event_loop_says_what_to_do(make_engine: EngineFactory) -> None:
    session = make_engine().start_session()
    with pytest.raises(UsageError, match="running event loop"):
        session.run("hello")


async def test_a_run_can_be_polled(model: ScriptedModel, make_engine: EngineFactory) -> None:
    model.add(text("slow answer", delay=1.0))
    engine = make_engine()
    run = engine.start_session().run("hello", secrets=model_secrets(model))
    assert not run.done
    assert run.status == "running"
    assert run.result is None
    while not run.done:  # polling is the point of this test  # noqa: ASYNC110
        await asyncio.sleep(0.05)
    assert run.status == "completed"
    assert run.result is not None
    assert run.result.text == "slow answer"
    assert (await run).text == "slow answer"  # awaiting a finished run gives the same result


async def test_engine_lists_sessions_and_versions(model: ScriptedModel, make_engine: EngineFactory) -> None:
    engine = make_engine()
    first, second = engine.start_session(), engine.start_session()
    assert {s.session_id for s in engine.list_sessions()} == {first.session_id, second.session_id}
    (version,) = engine.versions()
    assert version.version == engine.version
    assert version.spec["name"] == engine.name
    changed = make_engine(max_turns=3)  # another spec under the same name = another version
    assert len(changed.versions()) == 2
    assert changed.version != engine.version
