"""Pure checks used by the spec validators. Each returns nothing or raises ``spec_fail``."""

from __future__ import annotations

import re
from typing import Final
from urllib.parse import parse_qsl, urlsplit

from harness_run.spec._base import spec_fail

__all__ = [
    "check_dns_label",
    "check_env_key",
    "check_env_name",
    "check_env_value",
    "check_header",
    "check_model_for_harness",
    "check_requirement",
    "check_secret_name",
    "check_url_has_no_credentials",
    "looks_like_credential",
    "model_family",
    "placeholders",
]

_DNS_LABEL: Final = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_ENV_NAME: Final = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_PLACEHOLDER: Final = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")

# Words that mark an env var name as a credential (matched against the name's _-separated words).
_CREDENTIAL_WORDS: Final = frozenset(
    {
        "KEY",
        "APIKEY",
        "TOKEN",
        "SECRET",
        "SECRETS",
        "PASSWORD",
        "PASSWD",
        "PASS",
        "CREDENTIAL",
        "CREDENTIALS",
        "AUTH",
        "PRIVATE",
        "PAT",
        "COOKIE",
        "SESSIONID",
        "DSN",
    }
)
# Value shapes of well-known credentials (prefix-based: cheap and low on false positives).
_CREDENTIAL_VALUE: Final = re.compile(
    r"(sk-[A-Za-z0-9_-]{16,}|sk-ant-[A-Za-z0-9_-]{8,}|gh[pousr]_[A-Za-z0-9]{20,}|github_pat_[A-Za-z0-9_]{20,}"
    r"|xox[abposr]-[A-Za-z0-9-]{10,}|AKIA[0-9A-Z]{16}|AIza[0-9A-Za-z_-]{30,}|glpat-[A-Za-z0-9_-]{20,}"
    r"|eyJ[A-Za-z0-9_-]{10,}\.eyJ[A-Za-z0-9_-]{10,}|-----BEGIN [A-Z ]*PRIVATE KEY-----"
    r"|^(Bearer|Basic|token)\s+\S{8,})"
)
_AUTH_HEADERS: Final = frozenset(
    {
        "authorization",
        "proxy-authorization",
        "x-api-key",
        "api-key",
        "x-auth-token",
        "cookie",
        "x-goog-api-key",
        "private-token",
    }
)
_TOKEN_QUERY_KEYS: Final = frozenset(
    {"token", "access_token", "api_key", "apikey", "key", "auth", "password", "secret", "sig"}
)

ANTHROPIC_ALIASES: Final = frozenset({"sonnet", "opus", "haiku", "opusplan", "default"})


def looks_like_credential(value: str) -> bool:
    return bool(_CREDENTIAL_VALUE.search(value))


def placeholders(text: str) -> list[str]:
    """Secret names referenced as ``${NAME}`` in a string."""
    return _PLACEHOLDER.findall(text)


def check_dns_label(value: str, what: str) -> str:
    if len(value) > 63 or not _DNS_LABEL.match(value):
        raise spec_fail(
            f"{value!r} is not a valid {what}: it names Kubernetes objects, so it must be 1-63 "
            "characters of lowercase letters, digits and '-', starting and ending with a letter or digit",
            f"use e.g. {_suggest_label(value)!r}",
        )
    return value


def _suggest_label(value: str) -> str:
    label = re.sub(r"[^a-z0-9-]+", "-", value.lower()).strip("-")[:63].strip("-")
    return label or "my-agent"


def check_env_name(name: str, where: str) -> None:
    if not _ENV_NAME.match(name):
        raise spec_fail(
            f"{name!r} is not a valid environment variable name",
            f"use letters, digits and '_' only, not starting with a digit ({where})",
            field=name,
        )


def check_secret_name(name: str) -> str:
    if not _ENV_NAME.match(name):
        raise spec_fail(
            f"secret name {name!r} is not a valid environment variable name",
            "secrets are passed to the agent as environment variables: use e.g. GH_TOKEN",
        )
    return name


def check_env_key(name: str) -> None:
    words = set(re.split(r"[^A-Z0-9]+", name.upper()))
    if words & _CREDENTIAL_WORDS:
        raise spec_fail(
            f"{name!r} looks like a credential; env is for non-secret settings and ends up in the image",
            f"declare it in `secrets: [{name}]` and pass the value per run with secrets={{...}}",
            field=name,
        )


def check_env_value(name: str, value: str) -> None:
    if looks_like_credential(value):
        raise spec_fail(
            f"the value of {name!r} looks like a credential; env values are baked into the image",
            f"declare {name!r} in `secrets` and pass the value per run with secrets={{...}}",
            field=name,
        )


def check_header(name: str, value: str) -> None:
    if name.lower() in _AUTH_HEADERS or looks_like_credential(value):
        raise spec_fail(
            f"static header {name!r} carries credentials; headers are stored in the image and manifests",
            f"use header_secrets={{{name!r}: 'SECRET_NAME'}} and pass the value per run",
        )


def check_url_has_no_credentials(url: str, what: str, fix: str) -> None:
    parts = urlsplit(url)
    if parts.username or parts.password:
        raise spec_fail(f"the {what} URL contains credentials (user:token@host)", fix)
    for key, value in parse_qsl(parts.query, keep_blank_values=True):
        if key.lower() in _TOKEN_QUERY_KEYS or looks_like_credential(value):
            raise spec_fail(f"the {what} URL carries a credential in its query ({key}=…)", fix)
    if looks_like_credential(url):
        raise spec_fail(f"the {what} URL contains something that looks like a token", fix)


def check_requirement(text: str) -> str:
    text = text.strip()
    if not text or text.startswith("-"):
        raise spec_fail(
            f"{text!r} is not a pip requirement (options and flags are not accepted)",
            "write one requirement per entry, e.g. 'httpx>=0.27'",
        )
    from packaging.requirements import InvalidRequirement, Requirement  # ~40 ms: only when used

    try:
        req = Requirement(text)
    except InvalidRequirement as exc:
        raise spec_fail(
            f"{text!r} is not a valid pip requirement: {exc}", "use PEP 508 form, e.g. 'httpx>=0.27'"
        ) from None
    if req.url:
        check_url_has_no_credentials(req.url, "package", "use a public URL or an index without tokens")
    return str(req)


def model_family(model: str) -> str | None:
    """'anthropic', 'openai' or None (unknown, e.g. a gateway or OpenRouter id like 'x/y')."""
    name = model.lower()
    if "/" in name:
        return None
    if name.startswith("claude") or name in ANTHROPIC_ALIASES:
        return "anthropic"
    if name.startswith(("gpt-", "gpt5", "o1", "o3", "o4", "codex", "chatgpt")):
        return "openai"
    return None


def check_model_for_harness(model: str, harness: str) -> None:
    family = model_family(model)
    if harness == "claude-code" and family == "openai":
        raise spec_fail(
            f"Claude Code runs Claude models; {model!r} is an OpenAI model",
            "use harness='codex' (or 'opencode') for OpenAI models, or a Claude model such as "
            "'claude-sonnet-4-6'",
            field="model",
        )
    if harness == "codex" and family == "anthropic":
        raise spec_fail(
            f"Codex runs OpenAI models; {model!r} is a Claude model",
            "use harness='claude-code' (or 'opencode') for Claude models, or an OpenRouter id "
            "such as 'anthropic/claude-sonnet-4.6'",
            field="model",
        )
