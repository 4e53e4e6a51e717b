"""What the HarnessBox tests share: the scripted model's rules, a real git smart-HTTP remote with
token auth, and :func:`check_readme_example` — a README example run and what it promises checked
(on any provider)."""

from __future__ import annotations

import subprocess
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from testkit.git_http import GitHttpServer, make_bare_repo

from harness_run.harnessbox import Provider
from harness_run.testing import Rule, ScriptedModel, shell, text

from ._helpers import model_secrets
from ._readme import adapt, readme_blocks, run_block

AUTHOR = "HarnessBox <harnessbox@localhost>"
RULES = [
    # the agent starts in the checkout (HarnessBox's working directory): plain relative paths
    Rule(match="failing test", reply=shell("echo fixed > fixed.txt")),
    Rule(match="Fix the tests", reply=shell("echo fixed > fixed.txt")),
    Rule(match="auth bug", reply=shell("echo auth > auth.txt")),
    Rule(match="dark mode", reply=shell("echo dark > dark.txt")),
    Rule(match="Hello", reply=text("hello there")),
    Rule(reply=text("all done"), tool_result=True),
]


def git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True).stdout.strip()


@dataclass
class Remote:
    bare: Path
    url: str
    token: str
    main: str

    def commit(self, branch: str) -> tuple[str, str, str]:
        """``(author, parent, files)`` of the branch's head commit."""
        shown = git(self.bare, "log", "-1", "--format=%an <%ae>|%P", branch)
        author, parent = shown.split("|")
        return author, parent, git(self.bare, "show", "--name-only", "--format=", branch)


@pytest.fixture
def remote(tmp_path: Path) -> Iterator[Remote]:
    token = f"repo-canary-{uuid.uuid4().hex[:12]}"
    bare = make_bare_repo(tmp_path / "srv", "repo", {"README.md": "repo\n"})
    with GitHttpServer(tmp_path / "srv", token) as server:
        yield Remote(bare, f"{server.url}/repo.git", token, git(bare, "rev-parse", "main"))


@pytest.fixture
def scripted() -> Iterator[ScriptedModel]:
    with ScriptedModel(RULES) as model:
        yield model


def namespace(provider: Provider, model: ScriptedModel, remote: Remote) -> dict[str, Any]:
    return {
        "PROVIDER": provider,
        "MODEL_SECRETS": model_secrets(model),
        "REMOTE": remote.url,
        "REPO_TOKEN": remote.token,
    }


async def check_readme_example(
    section: str, provider: Provider, model: ScriptedModel, remote: Remote, out: pytest.CaptureFixture[str]
) -> None:
    """Run the README's example of ``section`` and check what it promises (shared with docker)."""
    await run_block(adapt(readme_blocks()[section][0]), namespace(provider, model, remote))
    printed = out.readouterr().out
    assert "all done" in printed or "hello there" in printed, printed
    if section in ("Quickstart", "How It Works"):  # one session on main, committed and pushed on kill
        author, parent, files = remote.commit("main")
        assert (author, parent, files) == (AUTHOR, remote.main, "fixed.txt")
        assert git(remote.bare, "show", "main:fixed.txt") == "fixed"
    if section == "Multi-Session Mode":  # two branches created from main, each with its own work
        assert remote.commit("feat/auth") == (AUTHOR, remote.main, "auth.txt")
        assert remote.commit("feat/ui") == (AUTHOR, remote.main, "dark.txt")
        assert git(remote.bare, "rev-parse", "main") == remote.main
    assert remote.token not in printed
