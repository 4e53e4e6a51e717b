"""Fixtures for the security tests: a scripted model and engines on a per-test workdir."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from harness_run import AgentSpec, local
from harness_run.runtime.local import LocalEngine
from harness_run.testing import ScriptedModel

EngineFactory = Callable[..., LocalEngine]


@pytest.fixture
def model() -> Iterator[ScriptedModel]:
    with ScriptedModel() as scripted:
        yield scripted


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    return tmp_path / "workdir"


@pytest.fixture
def make_engine(workdir: Path) -> Iterator[EngineFactory]:
    """``make_engine(**spec_fields)`` -> a LocalEngine on ``workdir`` (closed after the test)."""
    engines: list[LocalEngine] = []

    def make(**fields: Any) -> LocalEngine:
        fields.setdefault("name", "sec")
        engine = local.deploy(AgentSpec(**fields), workdir=workdir)
        engines.append(engine)
        return engine

    yield make
    for engine in engines:
        engine.close()
