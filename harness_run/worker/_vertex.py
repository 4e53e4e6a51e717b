"""Claude models on GKE without keys: Claude Code's Vertex AI mode from the pod's settings.

The pod env carries ``HARNESS_RUN_VERTEX_PROJECT`` (and optionally ``HARNESS_RUN_VERTEX_REGION``,
default ``global``); credentials come from the pod's Workload Identity (Application Default
Credentials through the metadata server), so nothing secret is passed. A key or an endpoint given
with the run takes precedence: then this adds nothing.
"""

from __future__ import annotations

from collections.abc import Mapping

__all__ = ["VERTEX_PROJECT_ENV", "VERTEX_REGION_ENV", "vertex_env"]

VERTEX_PROJECT_ENV = "HARNESS_RUN_VERTEX_PROJECT"
VERTEX_REGION_ENV = "HARNESS_RUN_VERTEX_REGION"
DEFAULT_REGION = "global"

# Any of these, from the run or the pod, means "not Vertex": the caller chose a provider.
_OVERRIDES = (
    "ANTHROPIC_API_KEY",
    "ANTHROPIC_AUTH_TOKEN",
    "CLAUDE_CODE_OAUTH_TOKEN",
    "ANTHROPIC_BASE_URL",
    "OPENROUTER_API_KEY",
    "CLAUDE_CODE_USE_VERTEX",
    "CLAUDE_CODE_USE_BEDROCK",
)


def vertex_env(
    pod_env: Mapping[str, str],
    *,
    harness: str,
    secrets: Mapping[str, str],
    model_base_url: str | None = None,
) -> dict[str, str]:
    """The variables that put this turn's Claude Code in Vertex mode, or ``{}``.

    Vertex mode applies when the pod names a Vertex project, the turn's harness is Claude Code,
    and neither the run's secrets nor the pod give a key, token or endpoint of their own (nor does
    the spec's ``model_base_url``).
    """
    project = pod_env.get(VERTEX_PROJECT_ENV, "").strip()
    if not project or harness != "claude-code" or model_base_url:
        return {}
    if any(secrets.get(name) or pod_env.get(name) for name in _OVERRIDES):
        return {}
    region = pod_env.get(VERTEX_REGION_ENV, "").strip() or DEFAULT_REGION
    return {
        "CLAUDE_CODE_USE_VERTEX": "1",
        "ANTHROPIC_VERTEX_PROJECT_ID": project,
        "CLOUD_ML_REGION": region,
    }
