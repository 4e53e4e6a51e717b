"""Fixtures for the compiler tests: a representative spec, skill sources, git repos, the CRDs."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from harness_run import AgentSpec

REPO_ROOT = Path(__file__).resolve().parents[2]
GOLDEN = Path(__file__).with_name("golden")
# The Agent Sandbox CRDs are shared data next to the repository (not copied into it, per their README).
CRDS_DIR = Path(
    os.environ.get("HARNESS_RUN_CRDS_DIR", REPO_ROOT.parent / "shared" / "crds" / "agent-sandbox")
)

SKILL_MD = "---\nname: triage\ndescription: Triage failing tests.\n---\nRead the failure, then fix it.\n"


def git(cwd: Path, *args: str) -> str:
    env = {
        **os.environ,
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@example.com",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@example.com",
        "GIT_AUTHOR_DATE": "2024-01-01T00:00:00Z",
        "GIT_COMMITTER_DATE": "2024-01-01T00:00:00Z",
    }
    out = subprocess.run(["git", *args], cwd=cwd, env=env, check=True, capture_output=True, text=True)
    return out.stdout.strip()


@pytest.fixture
def skill_dir(tmp_path: Path) -> Path:
    """``<tmp>/skills/triage`` with a SKILL.md and an executable script."""
    root = tmp_path / "skills" / "triage"
    (root / "scripts").mkdir(parents=True)
    (root / "SKILL.md").write_text(SKILL_MD)
    script = root / "scripts" / "run.sh"
    script.write_text("#!/bin/sh\necho triage\n")
    script.chmod(0o755)
    return root


@pytest.fixture
def skill_repo(tmp_path: Path) -> Path:
    """A git repo with two commits on ``main`` and a branch ``stable`` at the first one."""
    repo = tmp_path / "skill-repo"
    (repo / "skills" / "review").mkdir(parents=True)
    git(repo, "init", "-q", "-b", "main")
    (repo / "skills" / "review" / "SKILL.md").write_text("---\nname: review\n---\nv1\n")
    (repo / "README.md").write_text("top level, not staged with subdir\n")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "v1")
    git(repo, "branch", "stable")
    (repo / "skills" / "review" / "SKILL.md").write_text("---\nname: review\n---\nv2\n")
    git(repo, "commit", "-q", "-am", "v2")
    return repo


def representative_spec(**overrides: Any) -> AgentSpec:
    """The golden spec: a local skill, stdio + remote MCP (header_secrets), packages, env, allowlist."""
    data: dict[str, Any] = {
        "name": "golden-agent",
        "harness": "claude-code",
        "model": "claude-sonnet-4-6",
        "extra_harnesses": ["codex"],
        "system_prompt": {"append": "Keep changes small."},
        "skills": [{"path": "skills/triage"}],
        "mcp_servers": [
            {
                "name": "files",
                "command": "npx",
                "args": ["-y", "@modelcontextprotocol/server-filesystem", "/workspace"],
                "env": {"LOG_LEVEL": "info"},
                "env_secrets": {"FS_API_TOKEN": "FS_TOKEN"},
            },
            {
                "name": "search",
                "url": "https://mcp.example.com/mcp",
                "headers": {"X-Client": "harness-run"},
                "header_secrets": {"Authorization": "Bearer ${SEARCH_KEY}"},
            },
        ],
        "packages": ["httpx>=0.27", "beautifulsoup4"],
        "system_packages": ["jq", "ripgrep"],
        "env": {"LOG_FORMAT": "json"},
        "allowed_tools": ["Bash", "Read", "mcp__search__query"],
        "disallowed_tools": ["WebFetch", "mcp__files__delete_file"],
        "network": ["pypi.org", "*.github.com", "mcp.example.com:8443"],
        "resources": {"cpu": "2", "memory": "4Gi"},
    }
    data.update(overrides)
    return AgentSpec.from_dict(data)


@pytest.fixture
def make_spec() -> Callable[..., AgentSpec]:
    return representative_spec
