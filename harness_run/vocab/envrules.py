"""Environment rules shared by the harness adapters and the secret routing: which variables are the
model providers' (endpoint, key, Vertex switches) and may be passed to a run without being declared."""

from __future__ import annotations

from typing import Final

__all__ = ["OPENCODE_PROVIDER_URL", "PROVIDER_VARIABLES"]

# Model-provider variables a run may pass without declaring them (endpoint and key per harness).
PROVIDER_VARIABLES: Final[frozenset[str]] = frozenset(
    {
        "ANTHROPIC_API_KEY",
        "ANTHROPIC_AUTH_TOKEN",
        "ANTHROPIC_BASE_URL",
        "CLAUDE_CODE_OAUTH_TOKEN",
        "OPENAI_API_KEY",
        "OPENAI_BASE_URL",
        "OPENROUTER_API_KEY",
        "OPENROUTER_BASE_URL",
        "CLAUDE_CODE_USE_VERTEX",
        "ANTHROPIC_VERTEX_PROJECT_ID",
        "CLOUD_ML_REGION",
        "ANTHROPIC_VERTEX_BASE_URL",
        "CLAUDE_CODE_SKIP_VERTEX_AUTH",
        "GOOGLE_APPLICATION_CREDENTIALS",
    }
)

# OpenCode's built-in providers read their key from the environment but take no endpoint variable:
# the model proxy names its address here and the OpenCode driver puts it in the provider's options.
OPENCODE_PROVIDER_URL: Final[dict[str, str]] = {
    "anthropic": "HARNESS_RUN_OPENCODE_ANTHROPIC_URL",
    "openai": "HARNESS_RUN_OPENCODE_OPENAI_URL",
}
