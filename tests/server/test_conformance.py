"""One scenario, three engines: a local engine in process, the same spec in containers
(``local.deploy(isolation="container")``, the in-image worker behind it) and through `harness-run
serve` (``harness_run.connect``). Sessions and runs must behave the same: await, async-iterate,
poll, send, history, get_session from a second client, exec, interrupt."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import harness_run
from harness_run import AgentSpec, Engine, local
from harness_run.events import DeltaEvent, MessageEvent, ResultEvent, ToolUseEvent, UserEvent
from harness_run.runtime.local import LocalEngine
from harness_run.testing import ScriptedModel, shell, text

from ._helpers import MODEL, ServerThread

pytestmark = pytest.mark.harness

Opener = Callable[[], Engine]


@pytest.fixture(params=["local", pytest.param("container", marks=pytest.mark.docker), "server"])
def engines(
    request: pytest.FixtureRequest, tmp_path: Path, scripted_model: ScriptedModel
) -> Iterator[Opener]:
    """``open()`` -> a new client Engine of one deployed spec (each call: another client)."""
    spec = AgentSpec(name="conf", harness="claude-code", model=MODEL, model_base_url=scripted_model.url)
    opened: list[Engine] = []
    if request.param == "local":

        def open_local() -> Engine:
            opened.append(LocalEngine(spec, workdir=tmp_path))
            return opened[-1]

        yield open_local
    elif request.param == "container":
        options: dict[str, Any] = {"container": request.getfixturevalue("container_opts")}

        def open_container() -> Engine:
            opened.append(local.deploy(spec, workdir=tmp_path, isolation="container", **options))
            return opened[-1]

        yield open_container
    else:
        with ServerThread(tmp_path, [spec]) as server:

            def open_remote() -> Engine:
                opened.append(harness_run.connect(server.url, api_key=server.key))
                return opened[-1]

            yield open_remote
    for engine in opened:
        engine.close()


async def test_a_session_behaves_the_same_locally_and_through_the_server(
    engines: Opener, scripted_model: ScriptedModel
) -> None:
    secrets = {"ANTHROPIC_API_KEY": "scripted-key"}  # the endpoint is the spec's (the operator's)
    marker = f"sleep 30.{uuid.uuid4().int % 10**6:06d}"
    scripted_model.add(shell("echo hi"), text("first answer"), text("second answer"))
    scripted_model.add(shell(f"bash -c '{marker}; echo done'"), text("never"))
    engine = engines()
    assert isinstance(engine, Engine)
    session = engine.start_session()

    run = session.run("say hi", secrets=secrets)
    assert run.status == "running" and not run.done
    seen = [event async for event in run]  # live, from the first event to the result
    result = await run
    assert run.done and run.status == "completed" and run.result == result
    assert result.text == "first answer" and not result.is_error
    assert isinstance(seen[0], UserEvent) and isinstance(seen[-1], ResultEvent)
    assert any(isinstance(e, ToolUseEvent) for e in seen)
    stored = [e for e in seen if not isinstance(e, DeltaEvent)]
    assert [e.seq for e in stored] == list(range(len(stored)))
    assert [e.type for e in run.events] == [e.type for e in stored]  # the stored events: no deltas
    assert [e.type for e in [event async for event in run]] == [e.type for e in seen]  # again: the same
    assert "".join(e.delta for e in seen if isinstance(e, DeltaEvent)) == "first answer"  # streamed
    assert not [e for e in session.events() if e.type == "delta"]

    second = await session.send("and again", secrets=secrets)
    assert second.text == "second answer" and session.record.turns == 2
    assert [t.prompt for t in session.history()] == ["say hi", "and again"]
    assert any(isinstance(e, MessageEvent) for e in session.events(2))

    other = engines()  # a second client re-attaches by id
    again = other.get_session(session.session_id)
    assert again.record.turns == 2 and again.last_result is not None
    assert again.last_result.text == "second answer"
    assert session.session_id in [r.session_id for r in other.list_sessions()]
    made = await session.exec("echo $((6*7)) > answer.txt && cat answer.txt")
    assert (made.exit_code, made.stdout) == (0, "42\n")
    assert (await again.exec("cat answer.txt")).stdout == "42\n"  # the same workspace

    long = session.send("run the long command", secrets=secrets)
    async for event in long:  # until the long command is under way
        if isinstance(event, ToolUseEvent):
            break
    await session.interrupt()
    stopped = await long
    assert stopped.stop_reason == "interrupted"
    assert session.status != "running" and session.record.turns == 3
    assert len(again.history()) == 3  # the other client sees the interrupted turn too
