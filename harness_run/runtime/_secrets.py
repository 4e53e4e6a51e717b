"""Per-run secrets and the agent's environment.

Secrets arrive with each run and live only in the harness process's environment. The agent's
environment is built from an allow-list of the parent's variables (no unrelated credentials leak
in), the spec's ``env``, the model endpoint variables and the run's secrets.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from harness_run.errors import UsageError
from harness_run.harness._files import mcp_secret_values
from harness_run.spec import AgentSpec

__all__ = ["OPENROUTER_URL", "PROVIDER_VARIABLES", "agent_env", "resolve_secrets", "secret_values"]

# Model-provider variables a run may pass without declaring them (endpoint and key per harness).
PROVIDER_VARIABLES: frozenset[str] = frozenset(
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
        "GOOGLE_APPLICATION_CREDENTIALS",
    }
)
_NOT_SECRET = frozenset(
    {
        "ANTHROPIC_BASE_URL",
        "OPENAI_BASE_URL",
        "OPENROUTER_BASE_URL",
        "CLAUDE_CODE_USE_VERTEX",
        "ANTHROPIC_VERTEX_PROJECT_ID",
        "CLOUD_ML_REGION",
    }
)
_PASS_THROUGH = (
    "PATH",
    "LANG",
    "LANGUAGE",
    "TERM",
    "TZ",
    "TMPDIR",
    "USER",
    "LOGNAME",
    "SHELL",
    "SSL_CERT_FILE",
    "SSL_CERT_DIR",
    "REQUESTS_CA_BUNDLE",
    "NODE_EXTRA_CA_CERTS",
    "PIP_CERT",
    "CURL_CA_BUNDLE",
    "GIT_SSL_CAINFO",
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "NO_PROXY",
    "http_proxy",
    "https_proxy",
    "no_proxy",
)
_ENDPOINT_VAR = {
    "claude-code": "ANTHROPIC_BASE_URL",
    "codex": "OPENAI_BASE_URL",
    "opencode": "OPENAI_BASE_URL",
}


def resolve_secrets(spec: AgentSpec, given: Mapping[str, str] | None) -> dict[str, str]:
    """Check a run's secrets against the spec and add provider variables from the environment.

    Raises UsageError naming missing required secrets or undeclared names (values never shown).
    """
    given = dict(given or {})
    bad = sorted(  # callers pass untyped data: check it
        str(k)
        for k, v in given.items()
        if not isinstance(k, str) or not isinstance(v, str)  # pyright: ignore[reportUnnecessaryIsInstance]
    )
    if bad:
        raise UsageError(f"secrets must map names to string values; fix the entries {bad}")
    declared = set(spec.secret_names)
    unknown = sorted(set(given) - declared - PROVIDER_VARIABLES)
    if unknown:
        raise UsageError(
            f"secrets {unknown} are not declared by spec {spec.name!r}; add them to the spec's "
            "`secrets` (names only) or drop them from this run"
        )
    missing = [s.name for s in spec.secrets if s.required and s.name not in given]
    if missing:
        raise UsageError(
            f"this run needs the secrets {missing} declared by spec {spec.name!r}; pass them with "
            "secrets={NAME: value}"
        )
    endpoint_var = _ENDPOINT_VAR[spec.harness] if spec.model_base_url else None
    for name in PROVIDER_VARIABLES:  # precedence: secrets= > the spec's model_base_url > process env
        if name not in given and name != endpoint_var and os.environ.get(name):
            given[name] = os.environ[name]
    return given


def secret_values(secrets: Mapping[str, str]) -> list[str]:
    """The values to redact from everything we emit or store."""
    return [v for k, v in secrets.items() if k not in _NOT_SECRET and v]


def agent_env(
    spec: AgentSpec, secrets: Mapping[str, str], *, home: str, path_prefix: list[str]
) -> dict[str, str]:
    env = {k: os.environ[k] for k in _PASS_THROUGH if k in os.environ}
    env.update(spec.env)
    env.update(secrets)
    env.update(mcp_secret_values(spec, secrets))
    if spec.model_base_url and _ENDPOINT_VAR[spec.harness] not in secrets:
        env[_ENDPOINT_VAR[spec.harness]] = spec.model_base_url
    _route_openrouter(spec, env)
    env["HOME"] = home
    env["PATH"] = os.pathsep.join([*path_prefix, env.get("PATH", os.defpath)])
    return env


OPENROUTER_URL = "https://openrouter.ai/api/v1"


def _route_openrouter(spec: AgentSpec, env: dict[str, str]) -> None:
    """Models named ``vendor/model`` go through OpenRouter when the run has ``OPENROUTER_API_KEY``
    and no explicit endpoint for the harness: Claude Code through OpenRouter's Anthropic-compatible
    API (``ANTHROPIC_AUTH_TOKEN``), Codex/OpenCode through its OpenAI-compatible one.
    ``OPENROUTER_BASE_URL`` overrides the address (a proxy, or a test server)."""
    key = env.get("OPENROUTER_API_KEY")
    endpoint_var = _ENDPOINT_VAR[spec.harness]
    if not key or "/" not in spec.model or endpoint_var in env:
        return
    base = env.get("OPENROUTER_BASE_URL", OPENROUTER_URL).rstrip("/")
    if spec.harness == "claude-code":
        env["ANTHROPIC_BASE_URL"] = base.removesuffix("/v1")
        env["ANTHROPIC_AUTH_TOKEN"] = key
        env["ANTHROPIC_API_KEY"] = ""  # else Claude Code would prefer a key meant for Anthropic
    else:
        env["OPENAI_BASE_URL"] = base
        env["OPENAI_API_KEY"] = key
