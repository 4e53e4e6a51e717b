"""Field types shared by the spec models: ``Annotated`` strings, maps and values with their checks.

Each check lives here once and every model that has such a field uses the type, so the rule (and
the error a user sees) is the same wherever the field appears.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Annotated, Any, Final

from pydantic import AfterValidator, BeforeValidator, Field, PlainSerializer

from harness_run.spec._base import spec_fail
from harness_run.spec._checks import (
    check_dns_label,
    check_env_key,
    check_env_name,
    check_env_value,
    check_header,
    check_header_name,
    check_model_id,
    check_requirement,
    check_secret_name,
    check_text,
    check_url_has_no_credentials,
    placeholders,
)
from harness_run.spec._schema import check_output_schema, json_schema_of
from harness_run.spec._sources import check_git_ref, check_git_url, check_relative_path, check_skill_path

__all__ = [
    "DURATION_PATTERN",
    "AgentName",
    "Command",
    "DebPackage",
    "Duration",
    "EnvSecretMap",
    "EnvSettings",
    "GitRef",
    "HeaderSecretMap",
    "Headers",
    "McpServerName",
    "McpUrl",
    "ModelBaseUrl",
    "ModelId",
    "OutputSchemaField",
    "PipRequirement",
    "RepoDir",
    "RepoUrl",
    "SecretName",
    "SkillName",
    "SkillPath",
    "SkillSubdir",
    "SkillUrl",
    "Text",
    "ToolName",
    "parse_duration",
]

_NAME: Final = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$")
DURATION_PATTERN: Final = r"^\s*([0-9]+(?:\.[0-9]+)?)\s*(ms|s|m|h)?\s*$"
_DURATION: Final = re.compile(DURATION_PATTERN)
_DEB_PACKAGE: Final = re.compile(r"^[a-z0-9][a-z0-9+.-]+(=[A-Za-z0-9.+:~-]+)?$")
_REPO_FIX: Final = (
    "remove the token from the URL and name a secret instead: RepoSource.git(url, auth='GH_TOKEN')"
)


def _simple_name(what: str) -> Callable[[str], str]:
    def check(value: str) -> str:
        if not _NAME.match(value):
            raise spec_fail(
                f"{value!r} is not a valid {what}",
                "use 1-63 letters, digits, '.', '_' or '-', starting with a letter or digit",
            )
        return value

    return check


def _non_blank(value: str) -> str:
    if not value.strip():
        raise spec_fail("is blank", "give a value")
    return value


def _tool_name(value: str) -> str:
    """'Read', 'mcp__github__create_pr', 'Bash(git log:*)': one line, not blank."""
    if not value.strip() or not value.isprintable():
        raise spec_fail(
            f"the tool name {value!r} is blank or contains control characters",
            "give a tool name such as 'Read' or 'Bash(git log:*)'",
        )
    return value


def _repo_url(url: str) -> str:
    check_url_has_no_credentials(url, "repository", _REPO_FIX)
    return check_git_url(url)


def _skill_url(url: str) -> str:
    check_url_has_no_credentials(url, "skill", "skills are cloned at build time: use a public URL")
    return check_git_url(url)


def _mcp_url(url: str) -> str:
    _check_http(url, "give the server's full https:// URL")
    check_url_has_no_credentials(url, "MCP server", "use header_secrets for credentials")
    return url


def _model_base_url(url: str) -> str:
    _check_http(url, "give the endpoint's full URL")
    check_url_has_no_credentials(url, "model endpoint", "pass the key as a secret per run")
    return url.rstrip("/")


def _check_http(url: str, fix: str) -> None:
    if not url.startswith(("http://", "https://")) or not url.isprintable() or any(c.isspace() for c in url):
        raise spec_fail(f"{url!r} is not an http(s) URL", fix)


def parse_duration(value: Any) -> Any:
    """Seconds from a number or a string like '90s', '30m', '1.5h'."""
    if isinstance(value, str):
        match = _DURATION.match(value)
        if not match:
            raise spec_fail(f"{value!r} is not a duration", "use seconds, or e.g. '90s', '30m', '2h'")
        number = float(match.group(1))
        return number * {"ms": 0.001, "s": 1, "m": 60, "h": 3600}[match.group(2) or "s"]
    return value


def _deb_package(value: str) -> str:
    if not _DEB_PACKAGE.match(value):
        raise spec_fail(f"{value!r} is not a Debian package name", "use e.g. 'ripgrep' or 'jq=1.7*'")
    return value


def _env_settings(env: dict[str, str]) -> dict[str, str]:
    for key, value in env.items():
        check_env_name(key, "env keys")
        check_env_key(key)
        check_env_value(key, value)
    return env


def _secret_refs(mapping: dict[str, str]) -> dict[str, str]:
    """Values are a secret name or a template with ``${NAME}`` placeholders."""
    for ref in mapping.values():
        for name in placeholders(ref) or [ref]:
            check_secret_name(name)
    return mapping


def _env_secrets(mapping: dict[str, str]) -> dict[str, str]:
    for key in mapping:
        check_env_name(key, "env_secrets keys are environment variable names")
    return _secret_refs(mapping)


def _header_secrets(mapping: dict[str, str]) -> dict[str, str]:
    for key in mapping:
        check_header_name(key)
    return _secret_refs(mapping)


def _headers(headers: dict[str, str]) -> dict[str, str]:
    for name, value in headers.items():
        check_header(name, value)
    return headers


Text = Annotated[str, AfterValidator(check_text)]
"""Free text: anything but NUL."""
Command = Annotated[str, AfterValidator(check_text), AfterValidator(_non_blank)]
AgentName = Annotated[str, AfterValidator(lambda v: check_dns_label(v, "agent name"))]
SkillName = Annotated[str, AfterValidator(_simple_name("skill name"))]
McpServerName = Annotated[str, AfterValidator(_simple_name("MCP server name"))]
ModelId = Annotated[str, AfterValidator(check_model_id)]
SecretName = Annotated[str, AfterValidator(check_secret_name)]
ToolName = Annotated[str, AfterValidator(_tool_name)]
GitRef = Annotated[str, AfterValidator(check_git_ref)]
RepoUrl = Annotated[str, AfterValidator(_repo_url)]
SkillUrl = Annotated[str, AfterValidator(_skill_url)]
McpUrl = Annotated[str, AfterValidator(_mcp_url)]
ModelBaseUrl = Annotated[str, AfterValidator(_model_base_url)]
RepoDir = Annotated[
    str,
    AfterValidator(
        lambda v: v if v == "." else check_relative_path(v, "path", "give the directory name to clone into")
    ),
]
"""A repository's folder in the workspace; ``"."``: the workspace itself is the checkout (the agent
and ``exec`` commands then run in the repository)."""
SkillSubdir = Annotated[
    str,
    AfterValidator(lambda v: check_relative_path(v, "subdir", "leave subdir out for the whole repository")),
]
SkillPath = Annotated[str, AfterValidator(check_skill_path)]
PipRequirement = Annotated[str, AfterValidator(check_requirement)]
DebPackage = Annotated[str, AfterValidator(_deb_package)]
EnvSettings = Annotated[dict[str, Text], AfterValidator(_env_settings)]
"""Non-secret environment: valid names, none reserved or credential-like, no credential values."""
EnvSecretMap = Annotated[dict[str, Text], AfterValidator(_env_secrets)]
HeaderSecretMap = Annotated[dict[str, Text], AfterValidator(_header_secrets)]
Headers = Annotated[dict[str, str], AfterValidator(_headers)]
Duration = Annotated[float, BeforeValidator(parse_duration), Field(gt=0, allow_inf_nan=False)]
"""Seconds; also '90s', '30m', '1.5h'."""
OutputSchemaField = Annotated[
    Any,
    BeforeValidator(check_output_schema),
    PlainSerializer(json_schema_of),
    Field(description="A pydantic model class or a JSON Schema object."),
]
