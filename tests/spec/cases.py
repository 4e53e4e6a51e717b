"""Shared spec tables for the spec tests: GOOD specs (the seed README's examples verbatim, plus
minimal and shorthand forms) and helpers. Imported by the test modules of this package."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pydantic import BaseModel

from harness_run import AgentSpec, McpServer, RepoSource, SkillSource, SystemPrompt
from harness_run.errors import SpecError, SpecIssue


class FixResult(BaseModel):
    """A structured-output model, as a user would pass it."""

    summary: str
    files_changed: list[str] = []
    ok: bool = True


DICT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"answer": {"type": "string"}, "score": {"type": "number"}},
    "required": ["answer"],
}


def readme_codex() -> AgentSpec:
    return AgentSpec(
        name="code-agent",
        harness="codex",
        model="gpt-5.6-luna",
        checkpoint=True,
    )


def readme_claude() -> AgentSpec:
    return AgentSpec(
        name="code-agent",
        harness="claude-code",
        model="claude-sonnet-4-6",
        checkpoint=True,
    )


def readme_repo_fixer() -> AgentSpec:
    return AgentSpec(
        name="repo-fixer",
        harness="codex",
        model="gpt-5.6-luna",
        system_prompt=SystemPrompt.inherit(append="Keep changes small and add tests."),
        # Skills from a git repository or a local directory, staged for the harness.
        skills=[SkillSource.git("https://github.com/zytedata/codex-skills")],
        # Cloned into the working directory before the agent runs; `auth` makes it push-ready.
        repos=[RepoSource.git("https://github.com/acme/some-repo", ref="main", auth="GH_TOKEN")],
        mcp_servers=[
            McpServer.github(),  # lets the agent open pull requests, using GH_TOKEN
            McpServer.remote(
                "search",
                "https://mcp.example.com",
                header_secrets={"Authorization": "SEARCH_AUTH"},
            ),
        ],
        packages=["httpx", "beautifulsoup4"],  # installed into the agent's environment
        checkpoint=True,
    )


def _minimal(harness: str, model: str, **extra: Any) -> Callable[[], AgentSpec]:
    return lambda: AgentSpec(name=f"min-{harness}", harness=harness, model=model, **extra)


GOOD: dict[str, Callable[[], AgentSpec]] = {
    "readme-codex": readme_codex,
    "readme-claude-code": readme_claude,
    "readme-repo-fixer": readme_repo_fixer,
    "minimal-claude-code": _minimal("claude-code", "claude-sonnet-4-6"),
    "minimal-claude-code-alias": _minimal("claude-code", "sonnet"),
    "minimal-codex": _minimal("codex", "gpt-5.6-luna"),
    "minimal-opencode": _minimal("opencode", "anthropic/claude-sonnet-4.6"),
    "opencode-openai": _minimal("opencode", "openai/gpt-5"),
    "claude-code-openrouter": _minimal("claude-code", "anthropic/claude-sonnet-4.6"),
    "codex-openrouter": _minimal("codex", "openai/gpt-5"),
    "output-schema-class": _minimal("codex", "gpt-5.6-luna", output_schema=FixResult),
    "output-schema-dict": _minimal("claude-code", "claude-sonnet-4-6", output_schema=DICT_SCHEMA),
    "network-none": _minimal("codex", "gpt-5.6-luna", network="none"),
    "network-open": _minimal("codex", "gpt-5.6-luna", network="open"),
    "network-list": _minimal("codex", "gpt-5.6-luna", network=["pypi.org", "*.github.com"]),
    "timeout-30m": _minimal("codex", "gpt-5.6-luna", timeout="30m"),
    "stdio-mcp-env-secrets": _minimal(
        "claude-code",
        "claude-sonnet-4-6",
        mcp_servers=[
            McpServer.stdio(
                "db",
                "npx",
                ["-y", "@acme/db-mcp"],
                env={"LOG_LEVEL": "debug"},
                env_secrets={"DATABASE_URL": "DB_URL"},
            )
        ],
    ),
    "system-prompt-str": _minimal("claude-code", "claude-sonnet-4-6", system_prompt="You fix bugs."),
    "kitchen-sink": _minimal(
        "claude-code",
        "claude-sonnet-4-6",
        extra_harnesses=["codex", "opencode"],
        skills=[
            SkillSource.git("https://github.com/acme/skills", ref="v1", subdir="skills/pdf"),
            SkillSource.local("./my-skills"),
        ],
        repos=[
            RepoSource.git("https://github.com/acme/a"),
            RepoSource.git("https://github.com/acme/b", depth=1),
        ],
        secrets=[{"name": "EXTRA", "required": False, "description": "optional"}, "OTHER_KEY"],
        env={"LOG_LEVEL": "info", "TZ": "UTC"},
        allowed_tools=["Read", "Edit"],
        disallowed_tools=["WebFetch"],
        permission_mode="acceptEdits",
        max_turns=12,
        max_budget_usd=2.5,
        reasoning_effort="high",
        resources={"cpu": "500m", "memory": "4Gi"},
        system_packages=["ripgrep", "jq"],
        setup_script="make deps",
        model_base_url="https://gateway.example.com/v1/",
    ),
}


def issue_at(err: SpecError, path: str) -> SpecIssue:
    """The issue reported at ``path`` (fails with the actual paths if there is none)."""
    for issue in err.issues:
        if issue.path == path:
            return issue
    raise AssertionError(f"no issue at {path!r}; got {err.paths}: {err}")
