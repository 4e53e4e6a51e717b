"""pytest plugin: the ``scripted_model`` fixture.

Enabled through the ``pytest11`` entry point ``harness_run_testing`` (or
``pytest_plugins = ["harness_run.testing.pytest_plugin"]`` in a conftest)::

    def test_agent(scripted_model):
        scripted_model.add(shell("touch x"), text("done"))
        env = scripted_model.env_for("claude-code")
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from harness_run.testing._model import ScriptedModel

__all__ = ["scripted_model"]


@pytest.fixture
def scripted_model() -> Iterator[ScriptedModel]:
    """A started :class:`ScriptedModel` with an empty script on an ephemeral port; stopped afterwards."""
    model = ScriptedModel().start()
    try:
        yield model
    finally:
        model.stop()
