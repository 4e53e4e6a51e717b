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

import functools
import json
import logging
import os
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Literal, cast, get_args, get_origin

from pydantic import BaseModel

from harness_run.errors import UsageError
from harness_run.events import AgentEvent
from harness_run.harness import mcp_secret_values
from harness_run.security._egress import AGENT_PROXY_ENV, proxy_env
from harness_run.spec import AgentSpec, GitRepo
from harness_run.vocab.envrules import PROVIDER_VARIABLES

__all__ = [
    "OPENROUTER_URL",
    "PROVIDER_VARIABLES",
    "SHORT_SECRET",
    "agent_env",
    "check_secrets",
    "exposed_secrets",
    "git_auth_env",
    "redact_event",
    "redact_text",
    "resolve_secrets",
    "routed_secret_names",
    "secret_forms",
    "secret_values",
]

_log = logging.getLogger("harness_run.security")
_NOT_SECRET = frozenset(
    {
        "ANTHROPIC_BASE_URL",
        "OPENAI_BASE_URL",
        "OPENROUTER_BASE_URL",
        "CLAUDE_CODE_USE_VERTEX",
        "ANTHROPIC_VERTEX_PROJECT_ID",
        "CLOUD_ML_REGION",
        "ANTHROPIC_VERTEX_BASE_URL",
        "CLAUDE_CODE_SKIP_VERTEX_AUTH",
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
    too_short = sorted(k for k, v in given.items() if 0 < len(v) < 4 and k not in _NOT_SECRET)
    if too_short:  # blanking 1-3 characters everywhere would mangle every output
        _log.warning("secrets %s are under 4 characters and will not be redacted", too_short)
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
    env.update(mcp_secret_values(spec, secrets, stdio=False))  # stdio servers: McpBroker
    env.update(git_auth_env(spec.repos, secrets))
    if spec.model_base_url and _ENDPOINT_VAR[spec.harness] not in secrets:
        env[_ENDPOINT_VAR[spec.harness]] = spec.model_base_url
    _route_openrouter(spec, env)
    if spec.harness == "claude-code" and _claude_scrub_available():
        env["CLAUDE_CODE_SUBPROCESS_ENV_SCRUB"] = "1"  # model keys stay out of its tool shells
    agent_proxy = os.environ.get(AGENT_PROXY_ENV)
    if agent_proxy:  # egress controlled (the worker): the egress proxy, never the worker's own
        env.update(proxy_env(agent_proxy))
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
    """``event`` with every secret form (see :func:`secret_forms`) blanked in every string it holds
    (keys and numbers too in its free-form fields: tool input, structured output, ``raw``); the same
    object when none occurs in it.

    Redaction works on values, never on the serialized JSON text: a secret that is also a JSON token
    (``false``, ``null``, ``type``) cannot break the event, whatever its value. Enumerated fields
    (``type``, ``stop_reason`` …) are never changed. Forms shorter than :data:`SHORT_SECRET`
    characters are blanked only as whole tokens (see :func:`redact_text`)."""
    if not forms:
        return event
    return _redact_model(event, forms)


def _redact_model[M: BaseModel](model: M, forms: Sequence[str]) -> M:
    changes: dict[str, object] = {}
    for name in _free_fields(type(model)):
        value: object = getattr(model, name)
        if isinstance(value, BaseModel):
            new: object = _redact_model(value, forms)
        else:
            new = _redact_value(value, forms, numbers=name in _FREE_FORM)
        if new is not value:
            changes[name] = new
    return model.model_copy(update=changes) if changes else model


_FREE_FORM = frozenset({"input", "structured_output", "raw"})


@functools.cache
def _free_fields(model: type[BaseModel]) -> tuple[str, ...]:
    """The fields of ``model`` that may hold a secret (all but the enumerated ones), once per class."""
    return tuple(name for name, info in model.model_fields.items() if not _is_literal(info.annotation))


def _is_literal(annotation: object) -> bool:
    return get_origin(annotation) is Literal or any(get_origin(a) is Literal for a in get_args(annotation))


SHORT_SECRET = 8
"""Secret forms shorter than this are blanked only as whole tokens: ``test`` blanks ``a test run``
but not ``tests``. Values under 4 characters are not redacted at all (a warning names them)."""

_WORD = r"[A-Za-z0-9_]"


def redact_text(text: str, forms: Sequence[str]) -> str:
    """``text`` with each form replaced by ``***``: long forms anywhere, short ones (under
    :data:`SHORT_SECRET` characters) only where no letter, digit or ``_`` touches them."""
    for form in forms:
        if form not in text:
            continue
        if len(form) >= SHORT_SECRET:
            text = text.replace(form, "***")
        else:
            text = re.sub(f"(?<!{_WORD}){re.escape(form)}(?!{_WORD})", "***", text)
    return text


def _redact_value(value: object, forms: Sequence[str], *, numbers: bool) -> object:
    """``value`` (JSON data) with secret forms blanked; the same object when nothing changed."""
    if isinstance(value, str):
        new = redact_text(value, forms)
        return value if new == value else new
    if isinstance(value, BaseModel):
        return _redact_model(value, forms)
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, int | float):
        if numbers and redact_text(json.dumps(value), forms) != json.dumps(value):
            return "***"
        return value
    if isinstance(value, list):
        items = cast(list[object], value)
        new_items = [_redact_value(v, forms, numbers=numbers) for v in items]
        return items if all(a is b for a, b in zip(new_items, items, strict=True)) else new_items
    if isinstance(value, dict):
        mapping = cast(dict[str, object], value)
        new_map = {
            (redact_text(k, forms) if numbers else k): _redact_value(v, forms, numbers=numbers)
            for k, v in mapping.items()
        }
        same = list(new_map) == list(mapping) and all(new_map[k] is mapping[k] for k in mapping)
        return mapping if same else new_map
    return value
