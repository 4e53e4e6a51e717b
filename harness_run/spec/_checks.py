"""Pure checks used by the spec validators. Each returns its (checked) value or raises ``spec_fail``."""

from __future__ import annotations

import re
from typing import Final
from urllib.parse import parse_qsl, urlsplit

from harness_run.errors import UsageError
from harness_run.spec._base import spec_fail

__all__ = [
    "check_dns_label",
    "check_env_key",
    "check_env_name",
    "check_env_value",
    "check_header",
    "check_model_for_harness",
    "check_model_id",
    "check_prompt",
    "check_requirement",
    "check_secret_name",
    "check_text",
    "check_url_has_no_credentials",
    "is_reserved_env_name",
    "looks_like_credential",
    "model_family",
    "placeholders",
]

_DNS_LABEL: Final = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_ENV_NAME: Final = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_PLACEHOLDER: Final = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")
# Model ids: 'claude-sonnet-4-6', 'anthropic/claude-sonnet-4.6', 'x/y:free', 'claude-x@20250514',
# 'sonnet[1m]'. No spaces, quotes or shell syntax: the id is passed on to CLIs and config files.
_MODEL_ID: Final = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:/@+\[\]-]{0,199}$")
_HEADER_NAME: Final = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")

# Environment variables a spec may not set or name as a secret: they decide which programs and
# libraries run (PATH, LD_PRELOAD, PYTHONPATH, NODE_OPTIONS, GIT_SSH_COMMAND, ...), where the
# harnesses read their configuration (HOME, XDG_*, CODEX_HOME, ...), or are harness-run's own
# (HARNESS_RUN_*, incl. the HARNESS_RUN_MCP_* secret variables and GIT_CONFIG_* it sets for clones).
_RESERVED_ENV: Final = frozenset(
    {
        *("PATH", "HOME", "USER", "LOGNAME", "SHELL", "PWD", "OLDPWD", "TMPDIR", "IFS", "ENV"),
        *("BASH_ENV", "CDPATH", "PS4", "PROMPT_COMMAND", "SHELLOPTS", "BASHOPTS", "GLOBIGNORE"),
        *("NODE_OPTIONS", "NODE_PATH", "PERL5LIB", "PERL5OPT", "PERLLIB", "RUBYOPT", "RUBYLIB"),
        *("JAVA_TOOL_OPTIONS", "_JAVA_OPTIONS", "JDK_JAVA_OPTIONS", "GCONV_PATH", "HOSTALIASES"),
        *("GIT_SSH", "GIT_SSH_COMMAND", "GIT_ASKPASS", "SSH_ASKPASS", "GIT_EXEC_PATH", "GIT_DIR"),
        *("GIT_WORK_TREE", "GIT_TEMPLATE_DIR", "GIT_PROXY_COMMAND", "GIT_EXTERNAL_DIFF"),
        *("GIT_ALLOW_PROTOCOL", "GIT_PAGER", "GIT_EDITOR", "GIT_SEQUENCE_EDITOR", "PAGER", "EDITOR"),
        *("VISUAL", "XDG_CONFIG_HOME", "XDG_DATA_HOME", "XDG_STATE_HOME", "XDG_CACHE_HOME"),
        *("XDG_RUNTIME_DIR", "CODEX_HOME", "CLAUDE_CONFIG_DIR", "OPENCODE_CONFIG"),
        *("OPENCODE_CONFIG_DIR", "OPENCODE_CONFIG_CONTENT"),
    }
)
_RESERVED_ENV_PREFIXES: Final = ("LD_", "DYLD_", "PYTHON", "GIT_CONFIG", "HARNESS_RUN_", "BASH_FUNC_")
# Harmless settings under a reserved prefix that `env` may set (never as secret names).
_ENV_SETTINGS: Final = frozenset(
    {
        "PYTHONUNBUFFERED",
        "PYTHONDONTWRITEBYTECODE",
        "PYTHONIOENCODING",
        "PYTHONUTF8",
        "PYTHONHASHSEED",
        "HARNESS_RUN_CODEX_MAX_RETRIES",  # read by the Codex adapter from the turn's environment
    }
)

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


def check_text(value: str) -> str:
    """Free text (prompts, commands, arguments, descriptions): anything but NUL, which no process
    argument, environment variable or config file can carry."""
    if "\x00" in value:
        raise spec_fail("contains a NUL character (\\x00)", "remove the NUL character")
    return value


def check_model_id(value: str) -> str:
    if not _MODEL_ID.match(value):
        shown = "blank" if not value.strip() else repr(value)
        raise spec_fail(
            f"the model id is {shown}: a model id is one word of letters, digits and . _ : / @ + - [ ]",
            "give the model's id (non-empty, one word), e.g. 'claude-sonnet-4-6', 'gpt-5.6-luna' or "
            "'anthropic/claude-sonnet-4.6'",
        )
    return value


def check_prompt(prompt: object, what: str = "prompt") -> str:
    """A prompt or steering message for ``run()`` / ``send()``: a non-empty string without NUL.

    Raises :class:`~harness_run.errors.UsageError` (the caller's argument, not a spec field).
    """
    if not isinstance(prompt, str) or not prompt.strip():
        raise UsageError(f"the {what} must be a non-empty string")
    if "\x00" in prompt:
        raise UsageError(
            f"the {what} contains a NUL character (\\x00), which no harness can receive; remove it"
        )
    return prompt


def is_reserved_env_name(name: str, *, as_setting: bool = False) -> bool:
    """Whether ``name`` is an environment variable a spec may not set (``as_setting``: in ``env``,
    where a few harmless settings under reserved prefixes are allowed) or name as a secret."""
    upper = name.upper()
    if as_setting and upper in _ENV_SETTINGS:
        return False
    return upper in _RESERVED_ENV or upper.startswith(_RESERVED_ENV_PREFIXES)


def _check_not_reserved(name: str, what: str, *, as_setting: bool, field: str | None = None) -> None:
    if is_reserved_env_name(name, as_setting=as_setting):
        raise spec_fail(
            f"{name!r} cannot be {what}: it controls how programs run, where the harness reads its "
            "configuration, or is harness-run's own",
            "choose another name (e.g. prefix it with your application's name)",
            field=field,
        )


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
    """A variable a spec sets (``env``, an MCP server's ``env`` / ``env_secrets``)."""
    if not _ENV_NAME.match(name):
        raise spec_fail(
            f"{name!r} is not a valid environment variable name",
            f"use letters, digits and '_' only, not starting with a digit ({where})",
            field=name,
        )
    _check_not_reserved(name, "set by a spec", as_setting=True, field=name)


def check_secret_name(name: str) -> str:
    if not _ENV_NAME.match(name):
        raise spec_fail(
            f"secret name {name!r} is not a valid environment variable name",
            "secrets are passed to the agent as environment variables: use e.g. GH_TOKEN",
        )
    _check_not_reserved(name, "a secret name (secrets become environment variables)", as_setting=False)
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


def check_header_name(name: str) -> None:
    if not _HEADER_NAME.match(name):
        raise spec_fail(
            f"{name!r} is not an HTTP header name", "use letters, digits and '-', e.g. 'X-Team'", field=name
        )


def check_header(name: str, value: str) -> None:
    check_header_name(name)
    if any(c in value for c in "\r\n\x00"):
        raise spec_fail(
            f"the value of header {name!r} contains a line break or NUL", "give a one-line value", field=name
        )
    if name.lower() in _AUTH_HEADERS or looks_like_credential(value):
        raise spec_fail(
            f"static header {name!r} carries credentials; headers are stored in the image and manifests",
            f"use header_secrets={{{name!r}: 'SECRET_NAME'}} and pass the value per run",
        )


def check_url_has_no_credentials(url: str, what: str, fix: str) -> None:
    """No user:token@ (a bare ssh user such as ssh://git@host is not a credential), no token in the
    query, nothing shaped like a known token."""
    try:
        parts = urlsplit(url)
    except ValueError as exc:  # e.g. an unclosed IPv6 bracket
        raise spec_fail(f"{url!r} is not a valid URL ({exc})", "check the URL") from None
    if parts.password or (parts.username and parts.scheme.lower() != "ssh"):
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
        )
    if harness == "codex" and family == "anthropic":
        raise spec_fail(
            f"Codex runs OpenAI models; {model!r} is a Claude model",
            "use harness='claude-code' (or 'opencode') for Claude models, or an OpenRouter id "
            "such as 'anthropic/claude-sonnet-4.6'",
        )
