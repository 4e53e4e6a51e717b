"""Several harnesses in one engine: each session picks one of the baked harnesses, the model changes
per session or per turn, and a harness that is not baked is refused before anything starts."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness_run import local
from harness_run.errors import SpecError
from harness_run.spec import SessionConfig, TurnConfig
from harness_run.testing import ScriptedModel, text

from ._harnesses import HARNESS
from .conftest import EngineFactory


@pytest.mark.harness
async def test_one_engine_runs_each_baked_harness_and_switches_models(
    model: ScriptedModel, make_engine: EngineFactory, workdir: Path
) -> None:
    engine = make_engine(extra_harnesses=["codex", "opencode"])  # claude-code first
    claude = engine.start_session()
    codex = engine.start_session(SessionConfig(harness="codex", model="gpt-5.6-luna"))
    opencode = engine.start_session({"harness": "opencode", "model": "openai/gpt-5.1"})
    assert [s.harness for s in (claude, codex, opencode)] == ["claude-code", "codex", "opencode"]

    for session, name in ((claude, "claude-code"), (codex, "codex"), (opencode, "opencode")):
        model.add(text(f"hello from {name}"))
        result = await session.run("who are you?", secrets=HARNESS[name].secrets(model))
        assert not result.is_error, result.error
        assert (result.text, result.harness) == (f"hello from {name}", name)
    assert [r.model for r in model.main_requests] == ["claude-sonnet-4-6", "gpt-5.6-luna", "openai/gpt-5.1"]

    # the model per turn (and back to the session's own on the next turn)
    model.add(text("opus here"), text("sonnet again"), text("mini here"))
    turn = await claude.send(
        "again", secrets=HARNESS["claude-code"].secrets(model), config=TurnConfig(model="claude-opus-4-6")
    )
    assert turn.model == "claude-opus-4-6"
    assert (
        await claude.send("and again", secrets=HARNESS["claude-code"].secrets(model))
    ).model == "claude-sonnet-4-6"
    mini = await codex.send(
        "again", secrets=HARNESS["codex"].secrets(model), config={"model": "gpt-5.4-mini"}
    )
    assert (mini.text, mini.model) == ("mini here", "gpt-5.4-mini")
    assert [r.model for r in model.main_requests[3:]] == [
        "claude-opus-4-6",
        "claude-sonnet-4-6",
        "gpt-5.4-mini",
    ]
    assert [t.settings["model"] for t in claude.history()] == [
        "claude-sonnet-4-6",
        "claude-opus-4-6",
        "claude-sonnet-4-6",
    ]
    assert codex.history()[1].settings["harness"] == "codex"

    # another process re-attaches with the session's harness
    other = local.get_engine(engine.name, workdir=workdir)
    assert other.get_session(codex.session_id).harness == "codex"
    other.close()


def test_a_harness_that_is_not_baked_is_refused_before_anything_starts(
    make_engine: EngineFactory, workdir: Path
) -> None:
    engine = make_engine(extra_harnesses=["codex"])
    with pytest.raises(SpecError) as caught:
        engine.start_session(SessionConfig(harness="opencode", model="openai/gpt-5.1"))
    assert "'opencode' is not baked into engine 'rt'" in str(caught.value)
    assert "extra_harnesses=['opencode']" in str(caught.value)
    with pytest.raises(SpecError, match="pick one for codex too"):
        engine.start_session(SessionConfig(harness="codex"))  # a Claude model on Codex
    with pytest.raises(SpecError, match="cannot change within a session"):
        TurnConfig.from_dict({"harness": "codex"})
    assert engine.list_sessions() == []  # nothing was recorded
    assert not (workdir / "sessions").exists()
