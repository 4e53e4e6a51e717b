"""Git workflows on the sandbox runtime (test cluster): two sessions on two branches at once, one
created from its base, commits pushed with the right author and parent, a rejected push (clear error,
the commit kept in the sandbox), ``on_close`` committing through ``session.aclose()``, and
``delete_session`` removing the claim and its sandbox first, then history and checkpoints in GCS.
Real parts: the emulated Kubernetes API with the test controller (a real container per Sandbox),
fake-gcs-server, the real ``claude`` in the image, the scripted model and a git smart-HTTP server
with token auth on 127.0.0.1 (``tests/testkit/git_http.py``)."""

from __future__ import annotations

import asyncio
import subprocess
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from runtime._hbox import Remote, check_readme_example
from testkit.git_http import GitHttpServer, make_bare_repo

from harness_run import AgentSpec, GitOptions, RepoSource
from harness_run.testing import Reply, Rule, ScriptedModel
from harness_run.vocab import k8s

from .conftest import LOCATION, MODEL, PROJECT, Deployed

pytestmark = [pytest.mark.docker, pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(1200)]

AUTHOR = "Ada Bot <ada@example.com>"
RULES = [
    # the checkout: ./repo for the specs here, the workspace itself for HarnessBox's (path=".")
    Rule(match="auth bug", reply=Reply.shell("cd repo 2>/dev/null; echo auth > auth.txt")),
    Rule(match="dark mode", reply=Reply.shell("cd repo 2>/dev/null; echo dark > dark.txt")),
    Rule(match="failing test", reply=Reply.shell("cd repo 2>/dev/null; echo fixed > fixed.txt")),
    Rule(
        match="slow A", reply=Reply.shell("echo A-start >> repo/log.txt; sleep 1; echo A-end >> repo/log.txt")
    ),
    Rule(
        match="slow B", reply=Reply.shell("echo B-start >> repo/log.txt; sleep 1; echo B-end >> repo/log.txt")
    ),
    Rule(reply=Reply.text("all done"), tool_result=True),
]


def git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True).stdout.strip()


@dataclass
class Origin:
    bare: Path
    url: str
    token: str


@pytest.fixture(scope="module")
def model() -> Iterator[ScriptedModel]:  # this module's script (the deployed fixture uses it)
    with ScriptedModel(RULES) as scripted:
        yield scripted


@pytest.fixture(scope="module")
def origin(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Origin]:
    root = tmp_path_factory.mktemp("srv")
    token = f"repo-canary-{uuid.uuid4().hex[:12]}"
    bare = make_bare_repo(root, "repo", {"README.md": "repo\n"})
    with GitHttpServer(root, token) as server:
        yield Origin(bare, f"{server.url}/repo.git", token)


@pytest.fixture(scope="module")
def git_spec(deployed: Deployed, origin: Origin) -> AgentSpec:
    spec = AgentSpec(
        name="sbx-git",
        harness="claude-code",
        model=MODEL,
        checkpoint=True,
        repos=[RepoSource.git(origin.url, auth="GH_TOKEN")],
        git=GitOptions(commit="after_turn", push=True, author=AUTHOR, message="{branch}: turn {turn}"),
    )
    deployed.deploy(spec, idle_ttl=60.0, claim_timeout=60.0).close()
    return spec


def _engine(deployed: Deployed, spec: AgentSpec, **claims: float) -> Any:
    from harness_run import sandbox

    return sandbox.get_engine(
        spec.name,
        project=PROJECT,
        location=LOCATION,
        cluster=sandbox.ClusterTarget(api_client=deployed.cluster.api_client()),
        claims=sandbox.ClaimOptions(idle_ttl=60.0, claim_timeout=60.0, **claims),
        store=deployed.store_url,
    )


@pytest.fixture
async def engine(deployed: Deployed, git_spec: AgentSpec) -> AsyncIterator[Any]:
    eng = _engine(deployed, git_spec)
    yield eng
    await eng.aclose()


def _claims(d: Deployed, session_id: str) -> list[dict[str, Any]]:
    from harness_run.runtime.sandbox._claims import LABEL_SESSION
    from harness_run.runtime.sandbox._kube import Kube

    return Kube(d.cluster.api_client(), "default").list(k8s.SANDBOX_CLAIM, {LABEL_SESSION: session_id})


async def _gone(d: Deployed, sandbox_name: str, within: float = 30.0) -> bool:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        pod = d.controller.pod(sandbox_name)
        if pod is None or pod.removed:
            return True
        await asyncio.sleep(0.1)
    return False


async def test_two_branches_at_once_then_a_rejected_push_then_delete(
    deployed: Deployed, origin: Origin, engine: Any
) -> None:
    main = git(origin.bare, "rev-parse", "main")
    git(origin.bare, "branch", "feat/sbx-existing", "main")
    secrets = deployed.secrets(GH_TOKEN=origin.token)
    new = engine.start_session(branch="feat/sbx-new", base_branch="main")
    old = engine.start_session(branch="feat/sbx-existing")
    ra, rb = await asyncio.gather(
        new.run("Fix the auth bug", secrets=secrets), old.run("Add dark mode", secrets=secrets)
    )
    assert not ra.is_error and not rb.is_error, (ra.error, rb.error)
    for result, branch, file in ((ra, "feat/sbx-new", "auth.txt"), (rb, "feat/sbx-existing", "dark.txt")):
        assert result.pushed_ref == f"refs/heads/{branch}"
        assert git(origin.bare, "rev-parse", branch) == result.commit_sha
        assert (
            git(origin.bare, "log", "-1", "--format=%an <%ae>|%P|%s", branch)
            == f"{AUTHOR}|{main}|{branch}: turn 1"
        )
        assert git(origin.bare, "show", "--name-only", "--format=", branch) == file
    theirs = git(
        origin.bare, "-c", "user.name=o", "-c", "user.email=o@o", "commit-tree", "main^{tree}", "-m", "x"
    )
    git(origin.bare, "update-ref", "refs/heads/feat/sbx-new", theirs)
    second = await new.run("Fix the failing test", secrets=secrets)
    assert second.is_error and second.pushed_ref is None and second.commit_sha is not None
    assert "push" in (second.error or "") and "feat/sbx-new" in (second.error or "")
    assert origin.token not in (second.error or "")
    head = await new.exec("git -C repo rev-parse HEAD")
    assert head.stdout.strip() == second.commit_sha  # the commit is in the sandbox's workspace
    # delete: the claim and its sandbox go first, then records, events and checkpoint blobs
    assert len(_claims(deployed, new.session_id)) == 1
    sandbox_name = engine.claims.held(new.session_id).sandbox
    snapshot = engine.store.get_session(new.session_id).snapshot
    assert snapshot is not None and engine.store.get_blob(snapshot.workspace) is not None
    new.delete()
    assert _claims(deployed, new.session_id) == []
    assert await _gone(deployed, sandbox_name)
    assert engine.store.get_session(new.session_id) is None
    assert engine.store.list_turns(new.session_id) == []
    assert engine.store.get_blob(snapshot.workspace) is None
    assert engine.store.get_session(old.session_id) is not None


async def test_on_close_commits_and_pushes_through_the_sandbox_worker(
    deployed: Deployed, origin: Origin, engine: Any
) -> None:
    main = git(origin.bare, "rev-parse", "main")
    secrets = deployed.secrets(GH_TOKEN=origin.token)
    session = engine.start_session(
        {"branch": "feat/sbx-close", "base_branch": "main", "git": {"commit": "on_close", "push": True}}
    )
    result = await session.run("Fix the auth bug", secrets=secrets)
    assert not result.is_error and result.pushed_ref is None, result.error
    assert git(origin.bare, "branch", "--list", "feat/sbx-close") == ""
    await session.aclose()
    assert session.record.pushed_ref == "refs/heads/feat/sbx-close"
    assert git(origin.bare, "log", "-1", "--format=%P", "feat/sbx-close") == main
    assert git(origin.bare, "show", "--name-only", "--format=", "feat/sbx-close") == "auth.txt"
    assert _claims(deployed, session.session_id) == []  # released


async def test_a_new_session_on_the_same_branch_takes_over_the_idle_sandbox_without_cloning(
    deployed: Deployed, origin: Origin, git_spec: AgentSpec
) -> None:
    """Branch pooling on the sandbox runtime: the second session on a (remote, branch) runs in the
    first one's sandbox, in its checkout (its reflog shows one clone, then the refresh), commits on
    top of the first one's pushed work; the first session goes on in a new sandbox from its
    checkpoint. ``pool_after=0``: idle as soon as the turn has ended."""
    secrets = deployed.secrets(GH_TOKEN=origin.token)
    eng = _engine(deployed, git_spec, pool_after=0.0)
    try:
        first = eng.start_session(branch="feat/sbx-pool", base_branch="main")
        ra = await first.run("Fix the auth bug", secrets=secrets)
        assert not ra.is_error, ra.error
        sandbox_name = eng.claims.held(first.session_id).sandbox
        second = eng.start_session(branch="feat/sbx-pool")
        run = second.run("Add dark mode", secrets=secrets)
        rb = await run
        assert not rb.is_error, rb.error
        assert eng.claims.held(second.session_id).sandbox == sandbox_name
        assert eng.claims.held(first.session_id) is None
        assert [c["metadata"]["name"] for c in _claims(deployed, second.session_id)] == [
            eng.claims.held(second.session_id).name
        ]
        setup = [e.step for e in run.events if e.type == "setup"]
        assert any(f"reusing the idle workspace of session {first.session_id}" in s for s in setup), setup
        reflog = (await second.exec("git -C repo reflog --format=%gs")).stdout.splitlines()
        assert sum(line.startswith("clone:") for line in reflog) == 1, reflog  # the first session's
        assert "reset: moving to FETCH_HEAD" in reflog, reflog
        assert git(origin.bare, "log", "-1", "--format=%P", "feat/sbx-pool") == ra.commit_sha
        assert {r.session_id for r in eng.sessions(branch="feat/sbx-pool")} == {
            first.session_id,
            second.session_id,
        }
        again = await first.run("Fix the failing test", secrets=secrets)  # from its checkpoint
        assert again.is_error and "push" in (again.error or "")  # the branch moved on: rejected, kept
        assert eng.claims.held(first.session_id).sandbox != sandbox_name
        files = (await first.exec("ls repo")).stdout.split()
        assert "auth.txt" in files and "fixed.txt" in files and "dark.txt" not in files
    finally:
        await eng.aclose()


async def test_shared_sessions_take_turns_in_one_sandbox_and_a_new_one_starts_from_the_newest_checkpoint(
    deployed: Deployed, origin: Origin, git_spec: AgentSpec
) -> None:
    """``workspace.mode="shared"`` on the sandbox runtime: two sessions on one branch run in one
    sandbox and one checkout; turns sent at once take turns (the log is not interleaved, the two
    commits are pushed one on the other). When that sandbox is gone, the next turn's new sandbox
    starts from the newest checkpoint of any sharing session (its push is a fast-forward)."""
    from harness_run.runtime.worker_client._slots import shared_slot

    secrets = deployed.secrets(GH_TOKEN=origin.token)
    eng = _engine(deployed, git_spec)
    try:
        config = {"branch": "feat/sbx-shared", "base_branch": "main", "workspace": {"mode": "shared"}}
        a, b = eng.start_session(config), eng.start_session(config)
        ra, rb = await asyncio.gather(a.run("slow A", secrets=secrets), b.run("slow B", secrets=secrets))
        assert not ra.is_error and not rb.is_error, (ra.error, rb.error)
        slot = shared_slot(git_spec.name, a.record.config)
        assert slot is not None and eng.claims.held(a.session_id) is None
        assert [c["metadata"]["name"] for c in _claims(deployed, slot)] == [eng.claims.held(slot).name]
        log = git(origin.bare, "show", "feat/sbx-shared:log.txt").split()
        first = log[0][0]
        second = "B" if first == "A" else "A"
        assert log == [f"{first}-start", f"{first}-end", f"{second}-start", f"{second}-end"]
        earlier, later = (ra, rb) if first == "A" else (rb, ra)
        assert git(origin.bare, "log", "-1", "--format=%P", "feat/sbx-shared") == earlier.commit_sha
        assert git(origin.bare, "rev-parse", "feat/sbx-shared") == later.commit_sha
        assert "B-end" in (await a.exec("cat repo/log.txt")).stdout  # one checkout for both
        await eng.claims.release(eng.claims.held(slot))  # the sandbox goes, and its workspace
        starter = a if first == "A" else b  # its own checkpoint predates the other's turn
        again = await starter.run("Fix the auth bug", secrets=secrets)
        assert not again.is_error, again.error
        assert git(origin.bare, "log", "-1", "--format=%P", "feat/sbx-shared") == later.commit_sha
    finally:
        await eng.aclose()


async def test_harnessbox_readme_multi_session_example_on_agent_sandbox(
    deployed: Deployed, origin: Origin, capsys: pytest.CaptureFixture[str]
) -> None:
    """HarnessBox's README "Multi-Session Mode" example with ``provider=AgentSandboxProvider(...)``:
    two sessions on new branches, each in its own sandbox, pushed when killed."""
    from harness_run import sandbox
    from harness_run.harnessbox import AgentSandboxProvider

    provider = AgentSandboxProvider(
        project=PROJECT,
        location=LOCATION,
        cluster=sandbox.ClusterTarget(api_client=deployed.cluster.api_client()),
        image=sandbox.ImageOptions(
            base_image=deployed.base_image,
            ca_files=deployed.ca_files,
            build_network="host",
            registry=f"{deployed.registry}/hr-test",
        ),
        pods=sandbox.PodOptions(runtime_class=None),
        claims=sandbox.ClaimOptions(idle_ttl=60.0, claim_timeout=60.0),
        store=deployed.store_url,
        docker_client=deployed.docker_client,
    )
    remote = Remote(origin.bare, origin.url, origin.token, git(origin.bare, "rev-parse", "main"))
    await check_readme_example("Multi-Session Mode", provider, deployed.model, remote, capsys)
