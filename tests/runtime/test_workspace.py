"""Workspaces: repos cloned (push-ready, token never written), git skills at their ref, the
setup_script once per workspace, packages in a shared venv on the agent's PATH, exec()."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from harness_run import RepoSource, SkillSource
from harness_run.events import SetupEvent
from harness_run.testing import ScriptedModel, shell, text

from ._helpers import model_secrets, workspace_of
from .conftest import EngineFactory

pytestmark = pytest.mark.harness


def _git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True).stdout.strip()


def _make_repo(path: Path, files: dict[str, str]) -> str:
    path.mkdir(parents=True)
    _git(path, "init", "-q", "-b", "main")
    for name, content in files.items():
        (path / name).parent.mkdir(parents=True, exist_ok=True)
        (path / name).write_text(content)
    _git(path, "add", "-A")
    _git(path, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "init")
    return f"file://{path}"


async def test_repo_skill_setup_script_and_exec(
    model: ScriptedModel, make_engine: EngineFactory, tmp_path: Path
) -> None:
    repo_url = _make_repo(tmp_path / "src" / "app", {"README.md": "app\n"})
    skills_url = _make_repo(
        tmp_path / "src" / "skills",
        {"tidy/SKILL.md": "---\nname: tidy\ndescription: Keeps files tidy.\n---\nBe tidy.\n"},
    )
    token = "canary-repo-token-9f8e7d6c5b"
    engine = make_engine(
        repos=[RepoSource.git(repo_url, ref="main", auth="GH_TOKEN")],
        skills=[SkillSource.git(skills_url, ref="main", subdir="tidy")],
        setup_script="echo ran >> setup.log",
    )
    session = engine.start_session()
    model.add(shell("ls app && cat setup.log"), text("looked"), text("again"))

    result = await session.run("look around", secrets=model_secrets(model, GH_TOKEN=token))
    assert not result.is_error, result.error
    workspace = workspace_of(engine, session.session_id)
    assert (workspace / "app" / "README.md").read_text() == "app\n"
    assert (workspace / ".claude" / "skills" / "tidy" / "SKILL.md").is_file()
    git_config = (workspace / "app" / ".git" / "config").read_text()
    assert token not in git_config  # git gets the token from the environment (GIT_CONFIG_*) only
    assert any(
        e.type == "tool_result" and "README.md" in e.content and "ran" in e.content for e in session.events()
    )
    # the skill is offered to the model
    assert "tidy: Keeps files tidy." in model.main_requests[0].text

    # the setup script ran once per workspace, not once per turn
    await session.send("again", secrets=model_secrets(model, GH_TOKEN=token))
    assert (workspace / "setup.log").read_text() == "ran\n"

    # exec() runs in the workspace; a repo's auth secret goes to git only, not to the shell by name
    done = await session.exec('cat setup.log; echo "[$GH_TOKEN]"', secrets={"GH_TOKEN": token})
    assert done.exit_code == 0
    assert done.stdout.splitlines() == ["ran", "[]"]


async def test_packages_are_installed_into_a_shared_venv_on_path(
    model: ScriptedModel, make_engine: EngineFactory
) -> None:
    engine = make_engine(packages=["six==1.16.0"])
    model.add(
        shell("python -c 'import six; print(six.__version__)' > version.txt"),
        text("done"),
        shell("which python > which.txt"),
        text("done"),
    )
    first = engine.start_session()
    result = await first.run("check six", secrets=model_secrets(model))
    assert not result.is_error, result.error
    assert (workspace_of(engine, first.session_id) / "version.txt").read_text().strip() == "1.16.0"
    assert any(isinstance(e, SetupEvent) and "installing" in e.step for e in first.events())

    second = engine.start_session()  # same package set: the venv is reused, not rebuilt
    await second.run("which python", secrets=model_secrets(model))
    venv_python = (workspace_of(engine, second.session_id) / "which.txt").read_text().strip()
    assert "/venvs/" in venv_python
    assert not any(isinstance(e, SetupEvent) and "installing" in e.step for e in second.events())
