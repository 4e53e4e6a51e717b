"""Per-run secrets and the agent's environment.

Secrets arrive with each run and live only in the harness process's environment. The agent's
environment is built from an allow-list of the parent's variables (no unrelated credentials leak
in), the spec's ``env``, the model endpoint variables and the run's secrets — each routed to its
consumer only:

- model keys (:data:`PROVIDER_VARIABLES`) go to the harness process;
- a repository's ``auth`` token goes to git only, as ``GIT_CONFIG_*`` variables carrying an
  ``http.<repo url>.extraHeader`` (never argv, never ``.git/config``; it works for the agent's own
  ``git push`` too), not under the secret's own name;
- an MCP server's ``header_secrets`` / ``env_secrets`` go to that server only, through the
  ``HARNESS_RUN_MCP_<SERVER>_<KEY>`` variables its generated config references;
- every other declared secret is the agent's own (its shell sees it), and ``Secret(expose=...)``
  overrides the rule either way.

The harness process's environment is inherited by its tool commands unless the harness scrubs it:
Codex drops ``*KEY*``/``*SECRET*``/``*TOKEN*`` variables from tool shells by default; Claude Code's
``CLAUDE_CODE_SUBPROCESS_ENV_SCRUB`` needs bubblewrap (the pinned CLI refuses to start without it),
so it is set only on request (``HARNESS_RUN_CLAUDE_SCRUB=1``) where ``bwrap`` is installed; OpenCode
has no such switch. A tool command runs as the same user as its harness, so this keeps keys out of
casual reach (``env`` dumps, logs), not out of a determined agent's.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping, Sequence

from harness_run.errors import UsageError
from harness_run.events import AgentEvent
from harness_run.harness import mcp_secret_values
from harness_run.spec import AgentSpec, GitRepo
from harness_run.vocab.envrules import PROVIDER_VARIABLES

__all__ = [
    "OPENROUTER_URL",
    "PROVIDER_VARIABLES",
    "agent_env",
    "check_secrets",
    "exposed_secrets",
    "git_auth_env",
    "resolve_secrets",
    "routed_secret_names",
    "secret_forms",
    "secret_values",
]

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


def check_secrets(spec: AgentSpec, given: Mapping[str, str] | None) -> dict[str, str]:
    """Check names and value types (declared secrets and provider variables only); no values shown."""
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
    return given


def resolve_secrets(spec: AgentSpec, given: Mapping[str, str] | None) -> dict[str, str]:
    """Check a run's secrets against the spec and add provider variables from the environment.

    Raises UsageError naming missing required secrets or undeclared names (values never shown).
    No model key is demanded here: Claude Code on Vertex AI (``HARNESS_RUN_VERTEX_PROJECT`` in the
    worker's environment) needs none, and a harness without credentials reports that itself.
    """
    given = check_secrets(spec, given)
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


def routed_secret_names(spec: AgentSpec) -> set[str]:
    """Secrets with a consumer of their own: repository ``auth`` and MCP secret references."""
    names = {r.auth for r in spec.repos if r.auth}
    for server in spec.mcp_servers:
        names.update(server.secret_names())
    return names


def exposed_secrets(spec: AgentSpec, secrets: Mapping[str, str]) -> dict[str, str]:
    """The run's secrets the harness process (and so, mostly, the agent's shell) gets by name:
    provider variables, and declared secrets without a consumer of their own (or ``expose=True``)."""
    routed = routed_secret_names(spec)
    declared = {s.name: s for s in spec.secrets}
    out: dict[str, str] = {}
    for name, value in secrets.items():
        secret = declared.get(name)
        if (
            secret is None  # a model variable: the harness needs it
            or name in PROVIDER_VARIABLES
            or secret.expose
            or (secret.expose is None and name not in routed)
        ):
            out[name] = value
    return out


def git_auth_env(repos: Iterable[GitRepo], secrets: Mapping[str, str]) -> dict[str, str]:
    """``GIT_CONFIG_*`` variables giving git (only) each repository's token, scoped to its URL."""
    import base64

    entries: list[tuple[str, str]] = []
    for repo in repos:
        token = secrets.get(repo.auth) if repo.auth else None
        if token and repo.url.startswith(("http://", "https://")):
            basic = base64.b64encode(f"x-access-token:{token}".encode()).decode()
            entries.append((f"http.{repo.url}.extraHeader", f"Authorization: Basic {basic}"))
    if not entries:
        return {}
    env = {"GIT_CONFIG_COUNT": str(len(entries)), "GIT_TERMINAL_PROMPT": "0"}
    for index, (key, value) in enumerate(entries):
        env[f"GIT_CONFIG_KEY_{index}"] = key
        env[f"GIT_CONFIG_VALUE_{index}"] = value
    return env


def secret_forms(values: list[str]) -> list[str]:
    """What to blank for each value: itself, its JSON-escaped and base64 (git header) forms."""
    import base64

    forms: set[str] = set()
    for value in values:
        forms.update((value, json.dumps(value)[1:-1]))
        forms.add(base64.b64encode(f"x-access-token:{value}".encode()).decode())
    return sorted((f for f in forms if len(f) >= 4), key=len, reverse=True)


def agent_env(
    spec: AgentSpec, secrets: Mapping[str, str], *, home: str, path_prefix: list[str]
) -> dict[str, str]:
    env = {k: os.environ[k] for k in _PASS_THROUGH if k in os.environ}
    env.update(spec.env)
    env.update(exposed_secrets(spec, secrets))
    env.update(mcp_secret_values(spec, secrets))
    env.update(git_auth_env(spec.repos, secrets))
    if spec.model_base_url and _ENDPOINT_VAR[spec.harness] not in secrets:
        env[_ENDPOINT_VAR[spec.harness]] = spec.model_base_url
    _route_openrouter(spec, env)
    if spec.harness == "claude-code" and _claude_scrub_available():
        env["CLAUDE_CODE_SUBPROCESS_ENV_SCRUB"] = "1"  # model keys stay out of its tool shells
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


def _claude_scrub_available() -> bool:
    """Opt-in (``HARNESS_RUN_CLAUDE_SCRUB=1``) and only with ``bwrap`` on PATH: Claude Code's scrub
    runs tool commands under bubblewrap, which needs user namespaces the host may not allow."""
    import shutil

    return os.environ.get("HARNESS_RUN_CLAUDE_SCRUB") == "1" and shutil.which("bwrap") is not None


def redact_event(event: AgentEvent, forms: Sequence[str]) -> AgentEvent:
    """``event`` with every secret form (see :func:`secret_forms`) blanked; the same object when
    none occurs in it."""
    if not forms:
        return event
    text = event.model_dump_json()
    if not any(f in text for f in forms):
        return event
    for form in forms:
        text = text.replace(form, "***")
    return type(event).model_validate_json(text)
