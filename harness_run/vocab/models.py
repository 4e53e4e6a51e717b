"""The default model of each harness: what a caller gets when it names a harness but no model
(``HarnessBox(harness=...)``), and what ``harness-run doctor`` runs its smoke turn with.

Each is a model the harness's driver is tested with against the scripted model, priced by
:mod:`~harness_run.vocab.pricing` (so a budget works on it) and reached with the harness's usual
key: Claude Code with ``ANTHROPIC_API_KEY``, Codex and OpenCode with ``OPENAI_API_KEY``.
"""

from __future__ import annotations

from typing import Final

__all__ = ["DEFAULT_MODELS"]

DEFAULT_MODELS: Final[dict[str, str]] = {
    "claude-code": "claude-sonnet-4-6",
    "codex": "gpt-5.6-luna",
    "opencode": "openai/gpt-5.1",
}
