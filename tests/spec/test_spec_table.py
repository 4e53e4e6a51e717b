"""Good/bad spec table: good specs validate; each bad one names the field path and the fix."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from harness_run import AgentSpec, McpServer, RepoSource, Secret, SkillSource
from harness_run.errors import SpecError, UsageError
from harness_run.spec import GitRepo, Network, RemoteMcpServer, StdioMcpServer, SystemPrompt

from .cases import DICT_SCHEMA, GOOD, FixResult, issue_at

BASE: dict[str, Any] = {"name": "code-agent", "harness": "codex", "model": "gpt-5.6-luna"}
CLAUDE: dict[str, Any] = {"name": "code-agent", "harness": "claude-code", "model": "claude-sonnet-4-6"}


def _without(data: dict[str, Any], key: str) -> dict[str, Any]:
    return {k: v for k, v in data.items() if k != key}


def _mcp_remote(**kw: Any) -> dict[str, Any]:
    return {"kind": "remote", "name": "search", "url": "https://mcp.example.com", **kw}


# (id, data, expected path, fragment of the fix, fragment of the message or None)
BAD: list[tuple[str, dict[str, Any], str, str, str | None]] = [
    ("name-uppercase", {**BASE, "name": "Code-Agent"}, "name", "use e.g. 'code-agent'", "Kubernetes"),
    ("name-too-long", {**BASE, "name": "a" * 64}, "name", "use e.g.", "1-63 characters"),
    ("name-underscore", {**BASE, "name": "code_agent"}, "name", "use e.g. 'code-agent'", "'code_agent'"),
    ("name-empty", {**BASE, "name": ""}, "name", "use e.g.", None),
    ("harness-unknown", {**BASE, "harness": "cursor"}, "harness", "allowed values", "claude-code"),
    ("model-missing", _without(BASE, "model"), "model", "add this required field", None),
    ("name-missing", _without(BASE, "name"), "name", "add this required field", None),
    ("model-empty", {**BASE, "model": ""}, "model", "non-empty", None),
    ("gpt-on-claude-code", {**CLAUDE, "model": "gpt-5.6-luna"}, "model", "harness='codex'", "OpenAI model"),
    ("o3-on-claude-code", {**CLAUDE, "model": "o3"}, "model", "harness='codex'", None),
    (
        "claude-on-codex",
        {**BASE, "model": "claude-sonnet-4-6"},
        "model",
        "harness='claude-code'",
        "Claude model",
    ),
    ("alias-on-codex", {**BASE, "model": "opus"}, "model", "harness='claude-code'", None),
    (
        "env-name-gh-token",
        {**BASE, "env": {"GH_TOKEN": "x"}},
        "env.GH_TOKEN",
        "secrets: [GH_TOKEN]",
        "GH_TOKEN",
    ),
    (
        "env-name-api-key",
        {**BASE, "env": {"MY_API_KEY": "x"}},
        "env.MY_API_KEY",
        "secrets: [MY_API_KEY]",
        "credential",
    ),
    (
        "env-name-password",
        {**BASE, "env": {"DB_PASSWORD": "x"}},
        "env.DB_PASSWORD",
        "secrets: [DB_PASSWORD]",
        None,
    ),
    ("env-name-lowercase-token", {**BASE, "env": {"github_token": "x"}}, "env.github_token", "secrets", None),
    (
        "env-value-sk",
        {**BASE, "env": {"OPENAI": "sk-proj-abcdefghijklmnop1234"}},
        "env.OPENAI",
        "declare 'OPENAI' in `secrets`",
        "looks like a credential",
    ),
    (
        "env-value-ghp",
        {**BASE, "env": {"GITHUB": "ghp_" + "a1B2" * 9}},
        "env.GITHUB",
        "declare 'GITHUB' in `secrets`",
        None,
    ),
    (
        "env-value-bearer",
        {**BASE, "env": {"HDR": "Bearer abcdef123456"}},
        "env.HDR",
        "declare 'HDR' in `secrets`",
        None,
    ),
    ("env-name-invalid", {**BASE, "env": {"MY-VAR": "x"}}, "env.MY-VAR", "letters, digits and '_'", None),
    (
        "mcp-static-authorization",
        {**BASE, "mcp_servers": [_mcp_remote(headers={"Authorization": "Bearer x"})]},
        "mcp_servers[0].headers",
        "header_secrets",
        "Authorization",
    ),
    (
        "mcp-static-api-key-header",
        {**BASE, "mcp_servers": [_mcp_remote(headers={"X-Api-Key": "abc"})]},
        "mcp_servers[0].headers",
        "header_secrets",
        None,
    ),
    (
        "mcp-static-token-value",
        {**BASE, "mcp_servers": [_mcp_remote(headers={"X-Custom": "ghp_" + "z" * 36})]},
        "mcp_servers[0].headers",
        "header_secrets",
        None,
    ),
    (
        "mcp-url-not-http",
        {**BASE, "mcp_servers": [_mcp_remote(url="mcp.example.com")]},
        "mcp_servers[0].url",
        "https://",
        None,
    ),
    (
        "repo-url-userinfo",
        {**BASE, "repos": [{"url": "https://x-access-token:abc123@github.com/acme/r"}]},
        "repos[0].url",
        "auth='GH_TOKEN'",
        "credentials",
    ),
    (
        "repo-url-access-token",
        {**BASE, "repos": [{"url": "https://github.com/acme/r?access_token=abc123"}]},
        "repos[0].url",
        "auth='GH_TOKEN'",
        "access_token",
    ),
    (
        "skill-url-userinfo",
        {**BASE, "skills": [{"url": "https://u:p@github.com/acme/skills"}]},
        "skills[0].url",
        "public URL",
        None,
    ),
    ("unknown-top-level", {**BASE, "modle": "x"}, "modle", "check the spelling", "unknown key"),
    (
        "unknown-nested-repo",
        {**BASE, "repos": [{"url": "https://github.com/a/b", "branch": "main"}]},
        "repos[0].branch",
        "check the spelling",
        "unknown key",
    ),
    (
        "unknown-nested-resources",
        {**BASE, "resources": {"gpu": "1"}},
        "resources.gpu",
        "check the spelling",
        None,
    ),
    (
        "unknown-nested-mcp",
        {**BASE, "mcp_servers": [_mcp_remote(token="x")]},
        "mcp_servers[0].token",
        "check the spelling",
        None,
    ),
    (
        "unknown-nested-network",
        {**BASE, "network": {"egress": "open", "hosts": []}},
        "network.hosts",
        "check the spelling",
        None,
    ),
    (
        "secret-name-dash",
        {**BASE, "secrets": ["gh-token"]},
        "secrets[0].name",
        "use e.g. GH_TOKEN",
        "not a valid environment variable name",
    ),
    (
        "secret-name-digit",
        {**BASE, "secrets": [{"name": "1PASS"}]},
        "secrets[0].name",
        "use e.g. GH_TOKEN",
        None,
    ),
    (
        "auth-not-env-name",
        {**BASE, "repos": [{"url": "https://github.com/a/b", "auth": "gh token"}]},
        "repos[0].auth",
        "use e.g. GH_TOKEN",
        None,
    ),
    (
        "header-secret-not-env-name",
        {**BASE, "mcp_servers": [_mcp_remote(header_secrets={"Authorization": "a-b"})]},
        "mcp_servers[0].header_secrets",
        "use e.g. GH_TOKEN",
        "'a-b'",
    ),
    (
        "header-secret-placeholder-bad",
        {**BASE, "mcp_servers": [_mcp_remote(header_secrets={"Authorization": "Bearer ${not ok}"})]},
        "mcp_servers[0].header_secrets",
        "use e.g. GH_TOKEN",
        None,
    ),
    (
        "env-secret-not-env-name",
        {**BASE, "mcp_servers": [{"name": "db", "command": "x", "env_secrets": {"TOKEN": "db.token"}}]},
        "mcp_servers[0].env_secrets",
        "use e.g. GH_TOKEN",
        None,
    ),
    (
        "env-secret-key-not-env-name",
        {**BASE, "mcp_servers": [{"name": "db", "command": "x", "env_secrets": {"A-B": "TOKEN"}}]},
        "mcp_servers[0].env_secrets.A-B",
        "letters, digits and '_'",
        None,
    ),
    ("package-bad-syntax", {**BASE, "packages": ["httpx>>1"]}, "packages[0]", "PEP 508", "httpx>>1"),
    (
        "package-flag",
        {**BASE, "packages": ["--index-url https://x"]},
        "packages[0]",
        "one requirement per entry",
        None,
    ),
    ("package-empty", {**BASE, "packages": [""]}, "packages[0]", "one requirement per entry", None),
    (
        "package-url-token",
        {**BASE, "packages": ["pkg @ https://u:tok@example.com/pkg.whl"]},
        "packages[0]",
        "without tokens",
        None,
    ),
    (
        "duplicate-mcp-names",
        {**BASE, "mcp_servers": [_mcp_remote(), {"name": "search", "command": "x"}]},
        "mcp_servers",
        "distinct name",
        "'search'",
    ),
    ("duplicate-secret-names", {**BASE, "secrets": ["A", "A"]}, "secrets", "distinct name", None),
    (
        "tools-overlap",
        {**BASE, "allowed_tools": ["Bash", "Read"], "disallowed_tools": ["Bash"]},
        "disallowed_tools",
        "remove them from one of",
        "Bash",
    ),
    (
        "output-schema-array",
        {**BASE, "output_schema": {"type": "array", "items": {}}},
        "output_schema",
        "wrap the value in an object",
        "type: object",
    ),
    (
        "output-schema-no-type",
        {**BASE, "output_schema": {"properties": {}}},
        "output_schema",
        "wrap the value in an object",
        None,
    ),
    (
        "output-schema-str",
        {**BASE, "output_schema": "FixResult"},
        "output_schema",
        "BaseModel subclass",
        None,
    ),
    ("output-schema-list", {**BASE, "output_schema": [1]}, "output_schema", "BaseModel subclass", None),
    ("resources-cpu", {**BASE, "resources": {"cpu": "lots"}}, "resources.cpu", "use e.g. '500m'", "'lots'"),
    ("resources-memory", {**BASE, "resources": {"memory": "2 GB"}}, "resources.memory", "'4Gi'", None),
    ("resources-negative", {**BASE, "resources": {"cpu": "-1"}}, "resources.cpu", "'500m'", None),
    (
        "allowlist-without-hosts",
        {**BASE, "network": {"egress": "allowlist"}},
        "network.allow_hosts",
        "list hosts",
        "at least one host",
    ),
    ("allowlist-empty-list", {**BASE, "network": []}, "network.allow_hosts", "list hosts", None),
    (
        "hosts-without-allowlist",
        {**BASE, "network": {"egress": "none", "allow_hosts": ["pypi.org"]}},
        "network.allow_hosts",
        "egress: allowlist",
        None,
    ),
    (
        "network-bad-host",
        {**BASE, "network": ["https://pypi.org/simple"]},
        "network.allow_hosts",
        "'pypi.org'",
        None,
    ),
    ("network-bad-shorthand", {**BASE, "network": "closed"}, "network.egress", "allowed values", None),
    ("timeout-bad", {**BASE, "timeout": "soon"}, "timeout", "'30m'", None),
    ("timeout-zero", {**BASE, "timeout": 0}, "timeout", "larger value", None),
    ("max-turns-zero", {**BASE, "max_turns": 0}, "max_turns", "larger value", None),
    ("budget-negative", {**BASE, "max_budget_usd": -1}, "max_budget_usd", "larger value", None),
    ("effort-unknown", {**BASE, "reasoning_effort": "max"}, "reasoning_effort", "allowed values", None),
    (
        "mcp-unknown-kind",
        {**BASE, "mcp_servers": [{"kind": "ws", "name": "x"}]},
        "mcp_servers[0]",
        "`kind`",
        "'ws'",
    ),
    (
        "skill-subdir-escapes",
        {**BASE, "skills": [{"url": "https://github.com/a/b", "subdir": "../x"}]},
        "skills[0].subdir",
        "'..'",
        None,
    ),
    (
        "base-url-token",
        {**BASE, "model_base_url": "https://gw.example.com/v1?api_key=abc"},
        "model_base_url",
        "secret per run",
        None,
    ),
    # found by the fuzzer: these validated but did not survive to_dict/from_dict
    ("timeout-inf", {**BASE, "timeout": float("inf")}, "timeout", "finite number", None),
    ("budget-nan", {**BASE, "max_budget_usd": float("nan")}, "max_budget_usd", "finite number", None),
    ("timeout-overflow", {**BASE, "timeout": "9" * 400 + "h"}, "timeout", "finite number", None),
    (
        "output-schema-nan",
        {**BASE, "output_schema": {"type": "object", "maximum": float("nan")}},
        "output_schema",
        "finite numbers",
        "JSON-serializable",
    ),
    (
        "output-schema-int-key",
        {**BASE, "output_schema": {"type": "object", "properties": {1: {}}}},
        "output_schema",
        "string keys",
        None,
    ),
    ("unknown-key-whitespace", {**BASE, " ": 1}, "[' ']", "check the spelling", "unknown key"),
    (
        "unknown-nested-key-empty",
        {**BASE, "resources": {"": "1"}},
        "resources['']",
        "check the spelling",
        None,
    ),
]


@pytest.mark.parametrize("make", GOOD.values(), ids=GOOD.keys())
def test_good_spec_validates(make: Any) -> None:
    spec = make()
    assert isinstance(spec, AgentSpec)
    # validating its own data again gives an equal spec (no hidden normalisation drift)
    assert AgentSpec.from_dict(spec.to_dict()).to_dict() == spec.to_dict()


@pytest.mark.parametrize(("data", "path", "fix", "message"), [b[1:] for b in BAD], ids=[b[0] for b in BAD])
@pytest.mark.parametrize("route", ["from_dict", "constructor"])
def test_bad_spec_names_field_and_fix(
    route: str, data: dict[str, Any], path: str, fix: str, message: str | None
) -> None:
    load = AgentSpec.from_dict if route == "from_dict" else lambda d: AgentSpec(**d)
    with pytest.raises(SpecError) as info:
        load(data)
    err = info.value
    issue = issue_at(err, path)
    assert fix in issue.fix, issue
    if message is not None:
        assert message in issue.message, issue
    text = str(err)
    assert f"{path}: " in text
    assert issue.fix in text
    assert all(p for p in err.paths), err.paths


def test_several_problems_are_all_reported() -> None:
    with pytest.raises(SpecError) as info:
        AgentSpec.from_dict(
            {
                "name": "Bad_Name",
                "harness": "codex",
                "model": "gpt-5",
                "env": {"GH_TOKEN": "x"},
                "max_turns": 0,
                "extra": 1,
            }
        )
    assert {"name", "env.GH_TOKEN", "max_turns", "extra"} <= set(info.value.paths)


def test_spec_error_is_a_value_error_not_pydantic() -> None:
    with pytest.raises(SpecError) as info:
        AgentSpec(name="code-agent", harness="codex")  # type: ignore[call-arg]
    assert isinstance(info.value, ValueError)
    assert isinstance(info.value, UsageError)
    assert not isinstance(info.value, ValidationError)
    assert info.value.__cause__ is None  # no pydantic traceback chained into what users see


@pytest.mark.parametrize(
    "build",
    [
        lambda: RepoSource.git("https://user:tok@github.com/a/b"),
        lambda: SkillSource.git("https://github.com/a/b", subdir="/abs"),
        lambda: McpServer.remote("search", "https://x.example", headers={"Authorization": "Bearer abc"}),
        lambda: McpServer.stdio("bad name!", "npx"),
        lambda: McpServer.github(token_secret="gh-token"),
        lambda: Secret(name="no-dashes"),
        lambda: SystemPrompt(mode="append"),
        lambda: Network(egress="allowlist"),
        lambda: GitRepo(url="https://github.com/a/b", depth=0),
        lambda: RemoteMcpServer(name="x", url="ftp://x"),
        lambda: StdioMcpServer(name="x"),
    ],
    ids=[
        "repo",
        "skill",
        "remote-mcp",
        "stdio-mcp",
        "github-mcp",
        "secret",
        "prompt",
        "network",
        "depth",
        "remote-url",
        "stdio-missing",
    ],
)
def test_value_types_raise_spec_error(build: Any) -> None:
    with pytest.raises(SpecError) as info:
        build()
    assert not isinstance(info.value, ValidationError)
    assert info.value.issues
    assert all(issue.path and issue.fix for issue in info.value.issues)


# ---- secrets ------------------------------------------------------------------------------------


def test_referenced_secrets_are_declared_automatically_as_required() -> None:
    """Documented choice: secrets named by ``auth`` / ``header_secrets`` / ``env_secrets`` but not listed
    in ``secrets`` are added to ``secrets`` as required, in order of first reference."""
    spec = GOOD["readme-repo-fixer"]()
    assert spec.secret_names == ("GH_TOKEN", "SEARCH_AUTH")
    assert all(s.required for s in spec.secrets)

    stdio = GOOD["stdio-mcp-env-secrets"]()
    assert [(s.name, s.required) for s in stdio.secrets] == [("DB_URL", True)]


def test_explicit_optional_secret_stays_optional() -> None:
    spec = AgentSpec(
        **BASE,
        secrets=[Secret(name="GH_TOKEN", required=False)],
        repos=[RepoSource.git("https://github.com/acme/r", auth="GH_TOKEN")],
        mcp_servers=[McpServer.github()],
    )
    assert [(s.name, s.required) for s in spec.secrets] == [("GH_TOKEN", False)]


def test_declared_secrets_keep_their_order_and_auto_ones_follow() -> None:
    spec = AgentSpec(
        **BASE, secrets=["ZED", {"name": "ALPHA", "description": "d"}], mcp_servers=[McpServer.github()]
    )
    assert spec.secret_names == ("ZED", "ALPHA", "GH_TOKEN")
    assert spec.secrets[1].description == "d"


def test_secret_placeholder_template_declares_the_named_secret() -> None:
    server = McpServer.remote("s", "https://x.example", header_secrets={"Authorization": "Token ${API_T}"})
    spec = AgentSpec(**BASE, mcp_servers=[server])
    assert spec.secret_names == ("API_T",)


def test_secret_values_never_reach_the_spec() -> None:
    spec = GOOD["readme-repo-fixer"]()
    assert "Bearer ${GH_TOKEN}" in spec.to_yaml()  # only the reference, never a value
    assert "SEARCH_AUTH" in spec.to_yaml()


# ---- accepted shapes ----------------------------------------------------------------------------


def test_readme_repo_fixer_fields() -> None:
    spec = GOOD["readme-repo-fixer"]()
    assert spec.system_prompt == SystemPrompt(mode="inherit", text="Keep changes small and add tests.")
    assert spec.skills[0].url == "https://github.com/zytedata/codex-skills"
    assert spec.repos[0].auth == "GH_TOKEN"
    assert spec.repos[0].ref == "main"
    assert [m.name for m in spec.mcp_servers] == ["github", "search"]
    assert spec.packages == ("httpx", "beautifulsoup4")
    assert spec.checkpoint is True


def test_defaults_of_a_minimal_spec() -> None:
    spec = GOOD["readme-codex"]()
    assert spec.timeout == 1800
    assert spec.network.egress == "open"
    assert spec.max_turns is None
    assert spec.max_budget_usd is None
    assert spec.output_schema is None
    assert spec.harnesses == ("codex",)


@pytest.mark.parametrize(
    ("value", "seconds"), [("30m", 1800), ("90s", 90), ("1.5h", 5400), (45, 45), ("250ms", 0.25)]
)
def test_timeout_durations(value: Any, seconds: float) -> None:
    assert AgentSpec(**BASE, timeout=value).timeout == seconds


@pytest.mark.parametrize(
    ("value", "egress", "hosts"),
    [
        ("none", "none", ()),
        ("open", "open", ()),
        (["pypi.org", "*.github.com", "pypi.org"], "allowlist", ("*.github.com", "pypi.org")),
    ],
)
def test_network_shorthands(value: Any, egress: str, hosts: tuple[str, ...]) -> None:
    network = AgentSpec(**BASE, network=value).network
    assert (network.egress, network.allow_hosts) == (egress, hosts)


def test_output_schema_forms() -> None:
    assert GOOD["output-schema-class"]().output_schema is FixResult
    assert GOOD["output-schema-class"]().output_json_schema == FixResult.model_json_schema()
    assert GOOD["output-schema-dict"]().output_schema == DICT_SCHEMA


def test_system_prompt_str_replaces() -> None:
    assert GOOD["system-prompt-str"]().system_prompt == SystemPrompt.replace("You fix bugs.")


def test_numeric_resources_are_quantities() -> None:
    assert AgentSpec(**BASE, resources={"cpu": 2, "memory": "512Mi"}).resources.cpu == "2"
    assert AgentSpec(**BASE, resources={"cpu": 0.5}).resources.cpu == "0.5"


def test_primary_harness_is_not_repeated_in_extras() -> None:
    spec = AgentSpec(**BASE, extra_harnesses=["codex", "claude-code", "claude-code"])
    assert spec.harnesses == ("codex", "claude-code")


def test_env_with_ordinary_settings_is_accepted() -> None:
    env = {"LOG_LEVEL": "debug", "KEYBOARD": "us", "PYTHONUNBUFFERED": "1", "URL": "https://example.com"}
    assert AgentSpec(**BASE, env=env).env == env


def test_header_secrets_is_the_fix_for_static_headers() -> None:
    server = McpServer.remote(
        "search",
        "https://mcp.example.com",
        headers={"X-Region": "eu"},
        header_secrets={"Authorization": "SEARCH_AUTH"},
    )
    assert server.headers == {"X-Region": "eu"}
    assert AgentSpec(**BASE, mcp_servers=[server]).secret_names == ("SEARCH_AUTH",)
