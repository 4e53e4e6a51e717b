"""Claude models on GKE without keys: Claude Code's Vertex AI mode from the pod's settings.

The pod env carries ``HARNESS_RUN_VERTEX_PROJECT`` (and ``HARNESS_RUN_VERTEX_REGION`` when the spec
names a region); credentials come from the pod's Workload Identity (Application Default
Credentials through the metadata server), so nothing secret is passed. The region is the spec's
``env["CLOUD_ML_REGION"]``, else the pod's ``HARNESS_RUN_VERTEX_REGION``, else ``global`` (what
Claude's Vertex AI docs use; the deploy's location is where the cluster runs, not where the model is
served). A key or an endpoint given with the run takes precedence: then this adds nothing.
"""

from __future__ import annotations

from collections.abc import Mapping

__all__ = ["VERTEX_PROJECT_ENV", "VERTEX_REGION_ENV", "vertex_env"]

VERTEX_PROJECT_ENV = "HARNESS_RUN_VERTEX_PROJECT"
VERTEX_REGION_ENV = "HARNESS_RUN_VERTEX_REGION"
REGION_VARIABLE = "CLOUD_ML_REGION"
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
    spec_env: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """The variables that put this turn's Claude Code in Vertex mode, or ``{}``.

    Vertex mode applies when the pod names a Vertex project, the turn's harness is Claude Code,
    and neither the run's secrets nor the pod give a key, token or endpoint of their own (nor does
    the spec's ``model_base_url``). ``spec_env``: the spec's ``env``, whose ``CLOUD_ML_REGION``
    names the region.
    """
    project = pod_env.get(VERTEX_PROJECT_ENV, "").strip()
    if not project or harness != "claude-code" or model_base_url:
        return {}
    if any(secrets.get(name) or pod_env.get(name) for name in _OVERRIDES):
        return {}
    region = (
        (spec_env or {}).get(REGION_VARIABLE, "").strip()
        or pod_env.get(VERTEX_REGION_ENV, "").strip()
        or DEFAULT_REGION
    )
    return {
        "CLAUDE_CODE_USE_VERTEX": "1",
        "ANTHROPIC_VERTEX_PROJECT_ID": project,
        REGION_VARIABLE: region,
    }
