"""Fixtures for the conformance suite: every test runs once per harness, real CLI against the
scripted model (``harness`` marker). The runtime tests' ``model``/``workdir``/``make_engine``
fixtures are reused."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest
from runtime._helpers import API_KEY
from runtime.conftest import make_engine, model, workdir

from harness_run.runtime.local import LocalEngine
from harness_run.testing import ScriptedModel

__all__ = ["HARNESSES", "Harness", "make_engine", "model", "workdir"]


@dataclass(frozen=True)
class Harness:
    name: str
    model: str
    unknown_model: str
    """A model id no price table knows."""
    env: dict[str, str] = field(default_factory=dict[str, str])
    """Spec env for fast, deterministic errors (no client-side retries)."""
    boot_s: float = 2.0
    """Roughly how long the CLI takes to reach its first model request on a busy CI machine."""

    def secrets(self, scripted: ScriptedModel) -> dict[str, str]:
        if self.name == "claude-code":
            return {"ANTHROPIC_BASE_URL": scripted.url, "ANTHROPIC_API_KEY": API_KEY}
        return {"OPENAI_BASE_URL": scripted.openai_url, "OPENAI_API_KEY": API_KEY}


HARNESSES = {
    "claude-code": Harness("claude-code", "claude-sonnet-4-6", "claude-scripted-unknown-9"),
    "codex": Harness(
        "codex", "gpt-5.6-luna", "gpt-scripted-unknown-9", env={"HARNESS_RUN_CODEX_MAX_RETRIES": "0"}
    ),
    "opencode": Harness("opencode", "openai/gpt-5.1", "openai/gpt-scripted-unknown-9", boot_s=8.0),
}


@pytest.fixture(params=list(HARNESSES))
def harness(request: pytest.FixtureRequest) -> Harness:
    return HARNESSES[str(request.param)]


Agent = Callable[..., LocalEngine]


@pytest.fixture
def agent(harness: Harness, make_engine: Callable[..., LocalEngine]) -> Agent:
    """``agent(**spec_fields)`` -> an engine for the parametrized harness and its model."""

    def make(**fields: Any) -> LocalEngine:
        fields.setdefault("name", "conformance")
        fields.setdefault("model", harness.model)
        fields["env"] = {**harness.env, **fields.get("env", {})}
        return make_engine(harness=harness.name, **fields)

    return make
