"""Fixtures for the local runtime tests: a scripted model, an engine factory, process scans.

Every test that launches the real ``claude`` binary (bundled in the claude-agent-sdk wheel) is marked
``harness``; the model is always the in-process :class:`ScriptedModel` on 127.0.0.1.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from harness_run import AgentSpec, local
from harness_run.runtime.local import LocalEngine
from harness_run.testing import ScriptedModel

from ._hbox import remote, scripted  # noqa: F401 (the HarnessBox tests' fixtures)
from ._helpers import MODEL

EngineFactory = Callable[..., LocalEngine]


@pytest.fixture
def model() -> Iterator[ScriptedModel]:
    """A started scripted model with an empty script (tests ``model.add(...)`` their replies)."""
    with ScriptedModel() as started:
        yield started


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    return tmp_path / "workdir"


@pytest.fixture
def make_engine(workdir: Path) -> Iterator[EngineFactory]:
    """``make_engine(**spec_fields)`` -> a LocalEngine on ``workdir`` (closed after the test)."""
    engines: list[LocalEngine] = []

    def make(*, claude_binary: str | None = None, **fields: Any) -> LocalEngine:
        fields.setdefault("name", "rt")
        fields.setdefault("harness", "claude-code")
        fields.setdefault("model", MODEL)
        engine = local.deploy(AgentSpec(**fields), workdir=workdir, claude_binary=claude_binary)
        engines.append(engine)
        return engine

    yield make
    for engine in engines:
        engine.close()


@pytest.fixture
def cli_results(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    """The raw ``result`` lines the claude CLI printed during the test (to compare with RunResult)."""
    import json

    from harness_run.harness import claude_code

    seen: list[dict[str, Any]] = []
    feed = claude_code._ClaudeParser.feed

    def spy(self: Any, line: str) -> Any:
        try:
            data = json.loads(line)
        except ValueError:
            data = None
        if isinstance(data, dict) and data.get("type") == "result":
            seen.append(data)
        return feed(self, line)

    monkeypatch.setattr(claude_code._ClaudeParser, "feed", spy)
    return seen
