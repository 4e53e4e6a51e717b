"""``harness_run.harnessbox``: HarnessBox's README examples run as written (provider, model endpoint
and repo URL substituted, see ``_readme.py``) on the local provider, against the real ``claude`` CLI,
the scripted model and a real git smart-HTTP server with token auth; then what the README promises:
work committed and pushed to each session's branch on kill (right author and parent), branches
created from the base, streamed deltas, ``run_command``, clear refusals.
The same examples on the docker provider: ``test_harnessbox_docker.py``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from harness_run.errors import RunError, UsageError
from harness_run.events import ToolResultEvent
from harness_run.harnessbox import (
    FileSystemConfig,
    GitRepoConfig,
    HarnessBox,
    LocalProvider,
    SecurityPolicy,
    StreamEvent,
    WorkspaceConfig,
    WorkspaceMode,
)
from harness_run.spec import SessionConfig
from harness_run.testing import ScriptedModel

from ._hbox import Remote, check_readme_example, git
from ._helpers import model_secrets
from ._readme import adapt, readme_blocks, run_block
from .test_secrets import store_contents


@pytest.mark.harness
@pytest.mark.parametrize("section", ["", "Quickstart", "Multi-Session Mode", "How It Works"])
async def test_readme_examples_run_on_the_local_provider(
    section: str,
    scripted: ScriptedModel,
    remote: Remote,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    await check_readme_example(section, LocalProvider(workdir=tmp_path / "wd"), scripted, remote, capsys)


async def test_readme_security_policy_example_builds_the_policy() -> None:
    found: dict[str, Any] = {}
    await run_block(adapt(readme_blocks()["Security"][0]), found)
    policy = found["policy"]
    assert isinstance(policy, SecurityPolicy)
    assert policy.denied_tools == ("WebFetch", "WebSearch", "Agent") and policy.deny_network


@pytest.mark.harness
async def test_deltas_commands_branch_from_base_and_no_commit_when_turned_off(
    scripted: ScriptedModel, remote: Remote, tmp_path: Path
) -> None:
    git(remote.bare, "branch", "develop", "main")
    config = WorkspaceConfig(
        git_repo_config=GitRepoConfig(
            remote.url, branch="develop", base_branch="main", auth_token=remote.token
        ),
        commit_on_exit=False,
    )
    (tmp_path / "CLAUDE.md").write_text("Always be brief.")
    hb = HarnessBox(
        provider=LocalProvider(workdir=tmp_path / "wd"),
        harness="claude-code",
        system_prompt=tmp_path / "CLAUDE.md",
        workspace_config=config,
        secrets={"harness_secrets": model_secrets(scripted)},
    )
    session = await hb.create_session(branch="feat/x")
    events: list[StreamEvent] = [e async for e in session.send_message("Fix the auth bug")]
    assert "".join(e.delta or "" for e in events) == "all done"  # each answer once
    assert all(e.delta is None for e in events if e.type not in ("message", "delta"))
    done = await session.run_command("git rev-parse --abbrev-ref HEAD && cat auth.txt")  # in the checkout
    assert done.exit_code == 0 and done.stdout.split() == ["feat/x", "auth"]
    request = scripted.main_requests[0]
    assert "Always be brief." in request.text  # the system prompt file reached the model
    await hb.kill()
    assert session.commit_sha is None and session.pushed_ref is None
    heads = git(remote.bare, "branch", "--format=%(refname:short)").split()
    assert sorted(heads) == ["develop", "main"]  # commit_on_exit=False: nothing pushed
    with pytest.raises(UsageError, match="closed"):
        await session.run_command("true")


@pytest.mark.harness
async def test_a_rejected_push_on_kill_is_a_clear_error_and_the_work_stays_committed(
    scripted: ScriptedModel, remote: Remote, tmp_path: Path
) -> None:
    config = WorkspaceConfig(git_repo_config=GitRepoConfig(remote.url, auth_token=remote.token))
    hb = HarnessBox(
        provider=LocalProvider(workdir=tmp_path / "wd"),
        workspace_config=config,
        secrets={"harness_secrets": model_secrets(scripted)},
    )
    session = await hb.create_session(branch="feat/race")
    result = await session.send_message("Fix the auth bug", stream=False)
    assert result.text == "all done" and not result.is_error
    theirs = git(
        remote.bare, "-c", "user.name=o", "-c", "user.email=o@o", "commit-tree", "main^{tree}", "-m", "x"
    )
    git(remote.bare, "update-ref", "refs/heads/feat/race", theirs)  # someone else pushed meanwhile
    with pytest.raises(RunError, match="feat/race") as caught:
        await hb.kill()
    assert "push" in str(caught.value) and remote.token not in str(caught.value)
    assert session.commit_sha is not None and session.pushed_ref is None
    workspace = tmp_path / "wd" / "sessions" / session.session_id / "workspace"  # the checkout itself
    assert git(workspace, "rev-parse", "HEAD") == session.commit_sha  # nothing lost
    assert git(workspace, "show", "--name-only", "--format=", "HEAD") == "auth.txt"
    workdir, token = tmp_path / "wd", remote.token.encode()  # the token: in no file, blob or record
    assert [p for p in workdir.rglob("*") if p.is_file() and token in p.read_bytes()] == []
    assert [k for k, v in store_contents(workdir).items() if token in v] == []


async def test_providers_it_cannot_offer_are_refused_naming_the_ones_it_has() -> None:
    for name in ("ec2", "nope"):
        with pytest.raises(UsageError) as caught:
            HarnessBox(provider=name)
        message = str(caught.value)
        assert "'local', 'docker', 'agent-sandbox'" in message and "SandboxProvider port" in message
        assert "docs/providers.md" in message
    with pytest.raises(UsageError, match="EC2"):
        HarnessBox(provider="ec2")
    with pytest.raises(UsageError, match="base_url"):
        HarnessBox(api_key="hb_live_x")
    with pytest.raises(UsageError, match="harness_secrets") as bad:
        HarnessBox(secrets={"harness_secrets": {"K": 1}, "bogus": "s3cr3t-canary"})
    assert "s3cr3t-canary" not in str(bad.value) and "bogus" in str(bad.value)
    hb = HarnessBox(workspace_config=WorkspaceConfig(workspace_mode=WorkspaceMode.NEW))
    with pytest.raises(UsageError, match="git_repo_config"):
        await hb.create_session(branch="feat/a")
    with pytest.raises(UsageError, match="system_prompt"):
        HarnessBox(system_prompt=Path("/nonexistent/CLAUDE.md"))


@pytest.mark.harness
async def test_a_security_policy_reaches_the_harness(
    scripted: ScriptedModel, remote: Remote, tmp_path: Path
) -> None:
    hb = HarnessBox(
        provider=LocalProvider(workdir=tmp_path / "wd"),
        workspace_config=WorkspaceConfig(
            git_repo_config=GitRepoConfig(remote.url, auth_token=remote.token), commit_on_exit=False
        ),
        security_policy=SecurityPolicy(denied_bash_patterns=["echo auth*"]),
        secrets={"harness_secrets": model_secrets(scripted)},
    )
    async with hb:
        session = await hb.create_session(branch="feat/guarded")
        stream = session.send_message("Fix the auth bug")
        events = [e.event async for e in stream]
        assert not (await stream).is_error
        denied = [e for e in events if isinstance(e, ToolResultEvent)]
        assert denied and denied[0].is_error  # the agent's command was refused before it ran
        check = await session.run_command("test -e auth.txt")
        assert check.exit_code == 1


@pytest.mark.harness
async def test_shared_mode_and_host_directories_map_to_the_session_workspace(
    scripted: ScriptedModel, tmp_path: Path
) -> None:
    """``WorkspaceMode.SHARED``/``FileSystemConfig`` become ``SessionConfig.workspace``; where this
    harness-run has no such field yet (before the workspace-modes branch), a clear refusal."""
    project = tmp_path / "project"
    project.mkdir()
    secrets = {"harness_secrets": model_secrets(scripted)}
    shared = HarnessBox(
        provider=LocalProvider(workdir=tmp_path / "wd"),
        workspace_config=WorkspaceConfig(workspace_mode=WorkspaceMode.SHARED),
        secrets=secrets,
    )
    in_place = HarnessBox(
        provider=LocalProvider(workdir=tmp_path / "wd"),
        workspace_config=WorkspaceConfig(file_system_config=FileSystemConfig(host_dir=str(project))),
        secrets=secrets,
    )
    if "workspace" not in SessionConfig.model_fields:
        for hb in (shared, in_place):
            with pytest.raises(UsageError, match=r"WorkspaceMode\.NEW without file_system_config"):
                await hb.create_session()
        return
    async with shared:
        one, two = await shared.create_session(), await shared.create_session()
        assert not (await one.send_message("Fix the failing test", stream=False)).is_error
        assert (await two.run_command("cat fixed.txt")).stdout.strip() == "fixed"  # one workspace
    async with in_place:
        session = await in_place.create_session()
        assert not (await session.send_message("Fix the failing test", stream=False)).is_error
    assert (project / "fixed.txt").read_text().strip() == "fixed"  # used in place
