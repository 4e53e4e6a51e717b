"""The effective settings a turn record keeps (no secrets)."""

from __future__ import annotations

from typing import Any

from harness_run.spec import AgentSpec

__all__ = ["turn_settings"]

_SETTINGS_FIELDS = (
    "harness",
    "model",
    "system_prompt",
    "allowed_tools",
    "disallowed_tools",
    "permission_mode",
    "max_turns",
    "max_budget_usd",
    "reasoning_effort",
    "output_schema",
    "timeout",
    "model_base_url",
)


def turn_settings(spec: AgentSpec) -> dict[str, Any]:
    """The effective settings a turn record keeps (no secrets)."""
    data = spec.to_dict()
    return {k: data[k] for k in _SETTINGS_FIELDS}
