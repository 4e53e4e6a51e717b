"""A model that keeps failing ends the turn promptly as an error carrying the failure, with each
harness's default (bounded) retries: no spec ``env`` override here. The turn ``timeout`` is only a
generous ceiling that turns a hang into a failure; how long each takes is measured by
``benchmarks/failing_model.py``. OpenCode 1.18.33 is left out: its 5 retries with a 2-30 s backoff
are fixed (no setting), so such a turn takes ~70-80 s (the benchmark covers it)."""

from __future__ import annotations

import pytest
from runtime.conftest import EngineFactory

from harness_run.testing import ScriptedModel, drop, error, text

from .conftest import HARNESSES, Harness, make_engine, model, workdir

__all__ = ["make_engine", "model", "workdir"]

CEILING = "90s"  # the CLIs' own defaults held such turns 30-179 s
# what each CLI reports for a stream cut before the end
DROPPED = {"claude-code": "Connection dropped", "codex": "stream disconnected before completion"}


@pytest.mark.harness
@pytest.mark.parametrize("name", list(DROPPED))
async def test_a_model_whose_stream_keeps_dropping_ends_the_turn_as_an_error(
    model: ScriptedModel, make_engine: EngineFactory, name: str
) -> None:
    harness: Harness = HARNESSES[name]
    model.add(drop(), text("not reached"))
    engine = make_engine(harness=name, model=harness.model, timeout=CEILING)
    session = engine.start_session()
    result = await session.run("hello", secrets=harness.secrets(model))

    assert (result.is_error, result.stop_reason) == (True, "error"), result
    assert DROPPED[name] in (result.error or "")
    assert model.remaining == 1  # the script never got past the failure
    retries = [r for r in model.requests if r.is_model_request]
    assert 1 < len(retries) <= 10  # retried, but a bounded number of times
    assert session.status == "failed"


@pytest.mark.harness
async def test_codex_says_a_persistent_http_500_is_one(
    model: ScriptedModel, make_engine: EngineFactory
) -> None:
    harness = HARNESSES["codex"]
    model.add(error(500, "upstream boom q7"), text("not reached"))
    engine = make_engine(harness="codex", model=harness.model, timeout=CEILING)
    result = await engine.start_session().run("hello", secrets=harness.secrets(model))

    assert (result.is_error, result.stop_reason) == (True, "error")
    # Codex swaps a 500's body for its own "high demand" text; the result says what happened
    assert "answered HTTP 500" in (result.error or "")
    assert "high demand" in (result.error or "")
    assert len([r for r in model.requests if r.is_model_request]) == 9  # (1 + 2 retries) x (1 + 2)
