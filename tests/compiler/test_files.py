"""Per-harness config files and the MCP secret convention: names in files, values only at run time."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

import pytest

from harness_run import AgentSpec, SecurityPolicy
from harness_run.compiler import compile
from harness_run.errors import UsageError
from harness_run.harness._files import (
    claude_files,
    codex_files,
    harness_files,
    mcp_secret_env,
    mcp_secret_values,
    opencode_files,
)
from harness_run.harness._policy import claude_deny_rules

from .conftest import representative_spec

CANARY = "canary-7f3a9c1e5b"


def _secret_spec() -> AgentSpec:
    return AgentSpec.from_dict(
        {
            "name": "canary-agent",
            "harness": "codex",
            "model": "gpt-5.6-luna",
            "extra_harnesses": ["claude-code", "opencode"],
            "secrets": ["OPENAI_API_KEY", {"name": "OPTIONAL_TOKEN", "required": False}],
            "repos": [{"url": "https://github.com/acme/app", "auth": "GH_TOKEN"}],
            "mcp_servers": [
                {
                    "name": "github",
                    "url": "https://api.githubcopilot.com/mcp/",
                    "header_secrets": {"Authorization": "Bearer ${GH_TOKEN}"},
                },
                {
                    "name": "search",
                    "url": "https://mcp.example.com",
                    "transport": "sse",
                    "header_secrets": {"X-Api-Key": "SEARCH_KEY"},
                },
                {
                    "name": "db-tools",
                    "command": "db-mcp",
                    "args": ["--read-only"],
                    "env_secrets": {
                        "DB_PASSWORD": "DB_PASSWORD",
                        "DSN": "postgres://app:${DB_PASSWORD}@db/app",
                    },
                },
            ],
        }
    )


def test_mcp_secret_env_names() -> None:
    assert mcp_secret_env("github", "Authorization") == "HARNESS_RUN_MCP_GITHUB_AUTHORIZATION"
    assert mcp_secret_env("db-tools", "X-Api.Key") == "HARNESS_RUN_MCP_DB_TOOLS_X_API_KEY"


def test_mcp_secret_values_renders_names_and_templates() -> None:
    values = mcp_secret_values(_secret_spec(), {"GH_TOKEN": CANARY, "SEARCH_KEY": "k-1", "DB_PASSWORD": "pw"})
    assert values == {
        "HARNESS_RUN_MCP_GITHUB_AUTHORIZATION": f"Bearer {CANARY}",
        "HARNESS_RUN_MCP_SEARCH_X_API_KEY": "k-1",
        "HARNESS_RUN_MCP_DB_TOOLS_DB_PASSWORD": "pw",
        "HARNESS_RUN_MCP_DB_TOOLS_DSN": "postgres://app:pw@db/app",
    }


def test_mcp_secret_values_missing_secret() -> None:
    with pytest.raises(UsageError, match=r"'search' needs secret 'SEARCH_KEY'"):
        mcp_secret_values(_secret_spec(), {"GH_TOKEN": "x", "DB_PASSWORD": "y"})


def test_canary_never_reaches_the_build(tmp_path: Path) -> None:
    spec = _secret_spec()
    secrets = {
        "GH_TOKEN": CANARY,
        "SEARCH_KEY": CANARY + "-s",
        "DB_PASSWORD": CANARY + "-d",
        "OPENAI_API_KEY": CANARY + "-o",
        "OPTIONAL_TOKEN": CANARY + "-t",
    }
    plan = compile(spec)
    everything = (
        b"".join(plan.files.values()) + plan.manifests_yaml().encode() + plan.write(tmp_path).name.encode()
    )
    everything += b"".join(p.read_bytes() for p in tmp_path.rglob("*") if p.is_file())
    assert CANARY.encode() not in everything
    # The files reference the env vars by name; only mcp_secret_values produces the values.
    names = list(mcp_secret_values(spec, secrets))
    text = b"".join(v for k, v in plan.files.items() if k.startswith("config/")).decode()
    for name in names:
        assert name in text
    assert all(CANARY in v for v in mcp_secret_values(spec, secrets).values())
    assert set(json.loads(plan.files["spec.json"])["secrets"][i]["name"] for i in range(5)) == {
        "OPENAI_API_KEY",
        "OPTIONAL_TOKEN",
        "GH_TOKEN",
        "SEARCH_KEY",
        "DB_PASSWORD",
    }


def test_claude_files() -> None:
    files = claude_files(_secret_spec())
    mcp = json.loads(files["mcp.json"])["mcpServers"]
    assert mcp["github"] == {
        "type": "http",
        "url": "https://api.githubcopilot.com/mcp/",
        "headers": {"Authorization": "${HARNESS_RUN_MCP_GITHUB_AUTHORIZATION}"},
    }
    assert mcp["search"]["type"] == "sse"
    assert mcp["db-tools"] == {
        "type": "stdio",
        "command": "db-mcp",
        "args": ["--read-only"],
        "env": {
            "DB_PASSWORD": "${HARNESS_RUN_MCP_DB_TOOLS_DB_PASSWORD}",
            "DSN": "${HARNESS_RUN_MCP_DB_TOOLS_DSN}",
        },
    }
    settings = json.loads(claude_files(representative_spec())["settings.json"])
    assert settings == {
        "permissions": {
            "allow": ["Bash", "Read", "mcp__search__query"],
            "deny": list(
                dict.fromkeys(["WebFetch", "mcp__files__delete_file", *claude_deny_rules(SecurityPolicy())])
            ),
            "defaultMode": "bypassPermissions",
        }
    }
    # without the credential guards (and no other policy) only the spec's own deny list is left
    bare = representative_spec().model_copy(
        update={"security_policy": SecurityPolicy(include_credential_guards=False)}
    )
    assert json.loads(claude_files(bare)["settings.json"])["permissions"]["deny"] == [
        "WebFetch",
        "mcp__files__delete_file",
    ]


def test_codex_config_is_valid_toml() -> None:
    config = tomllib.loads(codex_files(_secret_spec())["config.toml"])
    servers = config["mcp_servers"]
    assert servers["github"] == {
        "url": "https://api.githubcopilot.com/mcp/",
        "env_http_headers": {"Authorization": "HARNESS_RUN_MCP_GITHUB_AUTHORIZATION"},
    }
    db = servers["db-tools"]
    assert db["command"] == "sh"
    assert db["args"][2:] == ["db-mcp", "--read-only"]
    assert 'DB_PASSWORD="$HARNESS_RUN_MCP_DB_TOOLS_DB_PASSWORD"' in db["args"][1]
    assert db["env_vars"] == ["HARNESS_RUN_MCP_DB_TOOLS_DB_PASSWORD", "HARNESS_RUN_MCP_DB_TOOLS_DSN"]
    assert (config["approval_policy"], config["sandbox_mode"]) == ("never", "danger-full-access")
    golden = tomllib.loads(codex_files(representative_spec())["config.toml"])
    assert golden["mcp_servers"]["files"]["disabled_tools"] == ["delete_file"]
    assert golden["mcp_servers"]["search"]["http_headers"] == {"X-Client": "harness-run"}


def test_codex_stdio_wrapper_renames_the_secret(tmp_path: Path) -> None:
    import subprocess

    db = tomllib.loads(codex_files(_secret_spec())["config.toml"])["mcp_servers"]["db-tools"]
    probe = tmp_path / "db-mcp"
    probe.write_text('#!/bin/sh\necho "$DB_PASSWORD|$DSN|$*"\n')
    probe.chmod(0o755)
    env = {
        "PATH": f"{tmp_path}:/usr/bin:/bin",
        **mcp_secret_values(_secret_spec(), {"GH_TOKEN": "g", "SEARCH_KEY": "s", "DB_PASSWORD": "p w"}),
    }
    out = subprocess.run([db["command"], *db["args"]], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "p w|postgres://app:p w@db/app|--read-only"


def test_toml_strings_are_escaped() -> None:
    spec = AgentSpec.from_dict(
        {
            "name": "t",
            "harness": "codex",
            "model": "gpt-5",
            "mcp_servers": [
                {
                    "name": "odd",
                    "command": 'C:\\tools\\"x"',
                    "args": ["tab\there", "line\nbreak", "ünï"],
                    "env": {"A": "\x7f"},
                }
            ],
        }
    )
    table = tomllib.loads(codex_files(spec)["config.toml"])["mcp_servers"]["odd"]
    assert table == {
        "command": 'C:\\tools\\"x"',
        "args": ["tab\there", "line\nbreak", "ünï"],
        "env": {"A": "\x7f"},
    }


def test_opencode_files() -> None:
    config = json.loads(opencode_files(_secret_spec())["opencode.json"])
    assert config["mcp"]["github"]["headers"] == {
        "Authorization": "{env:HARNESS_RUN_MCP_GITHUB_AUTHORIZATION}"
    }
    assert config["mcp"]["db-tools"]["command"] == ["db-mcp", "--read-only"]
    assert config["mcp"]["db-tools"]["type"] == "local"
    # the permission mode's action for everything, credential paths denied (the guards' default)
    assert config["permission"]["edit"]["*"] == "allow"
    assert config["permission"]["read"]["*.env"] == "deny"
    assert config["permission"]["bash"]["*"] == "allow"
    assert config["permission"]["bash"]["printenv"] == "deny"
    assert config["permission"]["webfetch"] == "deny"
    assert (config["autoupdate"], config["share"]) == (False, "disabled")


def test_harness_files_dispatch() -> None:
    spec = _secret_spec()
    assert harness_files(spec, "codex") == codex_files(spec)
    with pytest.raises(UsageError, match="unknown harness"):
        harness_files(spec, "aider")


def test_colliding_secret_env_names_are_refused() -> None:
    from harness_run.errors import SpecError

    spec = AgentSpec.from_dict(
        {
            "name": "t",
            "harness": "codex",
            "model": "gpt-5",
            "mcp_servers": [
                {"name": "a-b", "url": "https://x.example.com", "header_secrets": {"K": "S1"}},
                {"name": "a_b", "url": "https://y.example.com", "header_secrets": {"K": "S2"}},
            ],
        }
    )
    with pytest.raises(SpecError, match="HARNESS_RUN_MCP_A_B_K"):
        compile(spec)
