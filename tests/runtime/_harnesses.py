"""One description per harness for tests parametrized over all three (real CLIs, scripted model)."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

from harness_run.runtime.local import LocalEngine
from harness_run.testing import ScriptedModel

from ._helpers import API_KEY
from .conftest import EngineFactory

HARNESSES = ("claude-code", "codex", "opencode")


@dataclass(frozen=True)
class Harness:
    name: str
    model: str
    label: str

    def secrets(self, scripted: ScriptedModel, **extra: str) -> dict[str, str]:
        if self.name == "claude-code":
            return {"ANTHROPIC_BASE_URL": scripted.url, "ANTHROPIC_API_KEY": API_KEY, **extra}
        return {"OPENAI_BASE_URL": scripted.openai_url, "OPENAI_API_KEY": API_KEY, **extra}

    def engine(self, make_engine: EngineFactory, **fields: Any) -> LocalEngine:
        return make_engine(harness=self.name, model=self.model, **fields)

    def long_command(self, seconds: int) -> tuple[str, str]:
        """A shell command running ``seconds`` and a unique marker found in its process's command
        line (Claude Code refuses a bare ``sleep N`` tool call, hence ``bash -c``)."""
        marker = f"sleep {seconds}.{uuid.uuid4().int % 10**6:06d}"
        return marker, f"bash -c '{marker}; echo finished'"


HARNESS = {
    "claude-code": Harness("claude-code", "claude-sonnet-4-6", "Claude Code"),
    "codex": Harness("codex", "gpt-5.6-luna", "Codex"),
    "opencode": Harness("opencode", "openai/gpt-5.1", "OpenCode"),
}
