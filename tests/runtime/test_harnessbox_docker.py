"""Git workflows off the local runtime: HarnessBox's README examples on the docker provider, and the
container runtime's branches, commits, pushes and cleanup — each session in its own container of the
compiled image (real ``claude`` inside, host network), the scripted model and a real git smart-HTTP
server with token auth on 127.0.0.1, history in the workdir."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from harness_run import AgentSpec, GitOptions, RepoSource, local
from harness_run.errors import RunError, SessionBusyError
from harness_run.harnessbox import DockerProvider
from harness_run.testing import ScriptedModel

from ._hbox import Remote, check_readme_example, git
from ._helpers import MODEL, model_secrets

pytestmark = [pytest.mark.docker, pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(1200)]

AUTHOR = "Ada Bot <ada@example.com>"
LABEL_SESSION = "harness-run.dev/session"


@pytest.fixture(scope="module")
def docker_options(container_options: dict[str, Any]) -> dict[str, Any]:
    return container_options


def containers(docker_client: Any, session_id: str) -> list[Any]:
    return docker_client.containers.list(
        all=True, filters={"label": f"{LABEL_SESSION}={session_id}"}, ignore_removed=True
    )


@pytest.mark.harness
@pytest.mark.parametrize("section", ["", "Quickstart", "Multi-Session Mode"])
async def test_readme_examples_run_on_the_docker_provider(
    section: str,
    scripted: ScriptedModel,
    remote: Remote,
    tmp_path: Path,
    docker_options: dict[str, Any],
    capsys: pytest.CaptureFixture[str],
) -> None:
    provider = DockerProvider(workdir=tmp_path / "wd", **docker_options)
    await check_readme_example(section, provider, scripted, remote, capsys)
    client = docker_options["docker_client"]
    left = client.containers.list(
        all=True, filters={"label": "harness-run.dev/engine=harnessbox"}, ignore_removed=True
    )
    assert [c for c in left if str(tmp_path) in str(c.attrs.get("Mounts"))] == []  # kill released them


@pytest.fixture
async def container_engine(remote: Remote, tmp_path: Path, container_opts: Any) -> AsyncIterator[Any]:
    spec = AgentSpec(
        name="ctr-git",
        harness="claude-code",
        model=MODEL,
        checkpoint=True,
        repos=[RepoSource.git(remote.url, auth="GH_TOKEN", depth=1, path=".")],
        git=GitOptions(commit="after_turn", push=True, author=AUTHOR, message="{branch}: turn {turn}"),
    )
    engine = local.deploy(spec, workdir=tmp_path / "wd", isolation="container", container=container_opts)
    yield engine
    await engine.aclose()


@pytest.mark.harness
async def test_two_container_sessions_on_two_branches_push_then_a_rejected_push_then_delete(
    container_engine: Any,
    scripted: ScriptedModel,
    remote: Remote,
    tmp_path: Path,
    docker_options: dict[str, Any],
) -> None:
    engine = container_engine
    git(remote.bare, "branch", "feat/existing", "main")
    secrets = {**model_secrets(scripted), "GH_TOKEN": remote.token}
    new = engine.start_session(branch="feat/auth", base_branch="main")
    old = engine.start_session(branch="feat/existing")
    ra, rb = await asyncio.gather(
        new.run("Fix the auth bug", secrets=secrets), old.run("Add dark mode", secrets=secrets)
    )
    assert not ra.is_error and not rb.is_error, (ra.error, rb.error)
    assert (ra.pushed_ref, rb.pushed_ref) == ("refs/heads/feat/auth", "refs/heads/feat/existing")
    for result, branch, file in ((ra, "feat/auth", "auth.txt"), (rb, "feat/existing", "dark.txt")):
        assert git(remote.bare, "rev-parse", branch) == result.commit_sha
        assert git(remote.bare, "log", "-1", "--format=%an <%ae>|%P|%s", branch) == (
            f"{AUTHOR}|{remote.main}|{branch}: turn 1"
        )
        assert git(remote.bare, "show", "--name-only", "--format=", branch) == file
    client = docker_options["docker_client"]
    assert len(containers(client, new.session_id)) == 1  # each session had its own container
    # someone else pushes to feat/auth: the next push is rejected, the commit stays in the container
    theirs = git(
        remote.bare, "-c", "user.name=o", "-c", "user.email=o@o", "commit-tree", "main^{tree}", "-m", "x"
    )
    git(remote.bare, "update-ref", "refs/heads/feat/auth", theirs)
    second = await new.run("Fix the failing test", secrets=secrets)
    assert second.is_error and second.pushed_ref is None and second.commit_sha is not None
    assert "push" in (second.error or "") and "feat/auth" in (second.error or "")
    assert remote.token not in (second.error or "")
    head = await new.exec("git rev-parse HEAD && git show --name-only --format= HEAD")  # the checkout
    assert head.stdout.split() == [second.commit_sha, "fixed.txt"]  # nothing lost
    # delete: the container goes first, then workspace, checkpoints and history
    snapshot = engine.store.get_session(new.session_id).snapshot
    assert snapshot is not None and engine.store.get_blob(snapshot.workspace) is not None
    new.delete()
    assert containers(client, new.session_id) == []
    assert engine.store.get_session(new.session_id) is None
    assert engine.store.list_turns(new.session_id) == []
    assert engine.store.get_blob(snapshot.workspace) is None
    assert not (tmp_path / "wd" / "sessions" / new.session_id).exists()
    assert engine.store.get_session(old.session_id) is not None  # the other one stays


@pytest.mark.harness
async def test_on_close_commits_in_the_container_and_delete_is_refused_while_a_turn_runs(
    scripted: ScriptedModel,
    remote: Remote,
    tmp_path: Path,
    docker_options: dict[str, Any],
    container_opts: Any,
) -> None:
    spec = AgentSpec(
        name="ctr-close",
        harness="claude-code",
        model=MODEL,
        repos=[RepoSource.git(remote.url, auth="GH_TOKEN", path=".")],
        git=GitOptions(commit="on_close", push=True, author=AUTHOR, message="{branch}: closed"),
    )
    engine = local.deploy(spec, workdir=tmp_path / "wd", isolation="container", container=container_opts)
    secrets = {**model_secrets(scripted), "GH_TOKEN": remote.token}
    one = engine.start_session(branch="feat/one", base_branch="main")
    two = engine.start_session(branch="feat/two", base_branch="main")
    running = one.run("Fix the auth bug", secrets=secrets)
    assert one.status == "running"
    with pytest.raises(SessionBusyError):
        one.delete()
    assert not (await running).is_error
    assert not (await two.run("Add dark mode", secrets=secrets)).is_error
    assert git(remote.bare, "branch", "--list", "feat/*") == ""  # nothing pushed before close
    await one.aclose()  # just this session: commit, push, container released
    assert one.record.pushed_ref == "refs/heads/feat/one"
    assert git(remote.bare, "log", "-1", "--format=%an <%ae>|%P|%s", "feat/one") == (
        f"{AUTHOR}|{remote.main}|feat/one: closed"
    )
    client = docker_options["docker_client"]
    assert containers(client, one.session_id) == []
    await engine.aclose()  # the rest: close(kill) ends everything it holds, committing on the way
    assert git(remote.bare, "show", "--name-only", "--format=", "feat/two") == "dark.txt"
    assert containers(client, two.session_id) == []
    assert uuid.UUID(two.session_id)


@pytest.mark.harness
async def test_a_synchronous_close_cannot_commit_on_close_and_says_so(
    scripted: ScriptedModel,
    remote: Remote,
    tmp_path: Path,
    docker_options: dict[str, Any],
    container_opts: Any,
) -> None:
    spec = AgentSpec(
        name="ctr-sync-close",
        harness="claude-code",
        model=MODEL,
        checkpoint=True,
        repos=[RepoSource.git(remote.url, auth="GH_TOKEN", path=".")],
        git=GitOptions(commit="on_close", push=True),
    )
    engine = local.deploy(spec, workdir=tmp_path / "wd", isolation="container", container=container_opts)
    session = engine.start_session(branch="feat/sync", base_branch="main")
    secrets = {**model_secrets(scripted), "GH_TOKEN": remote.token}
    assert not (await session.run("Fix the auth bug", secrets=secrets)).is_error
    with pytest.raises(RunError, match=r"await engine\.aclose\(\)") as caught:
        engine.close()  # no turn runs: the blocking path, which cannot reach the worker
    assert session.session_id in str(caught.value) and remote.token not in str(caught.value)
    assert containers(docker_options["docker_client"], session.session_id) == []
    assert git(remote.bare, "branch", "--list", "feat/sync") == ""
