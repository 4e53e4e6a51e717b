"""Where sessions work: a workspace shared by an engine's sessions (turns take turns), branch
pooling (a new session on a (remote, branch) takes over an idle workspace: no clone), host
directories used in place (never deleted), and the retention setting of ``sessions prune``.
Real CLI turns on the scripted model; a real git smart-HTTP server with token auth."""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from testkit.git_http import GitHttpServer, make_bare_repo

from harness_run import AgentSpec, RepoSource, SessionConfig, WorkspaceOptions, local
from harness_run.cli import main
from harness_run.errors import SpecError, UsageError
from harness_run.events import SetupEvent
from harness_run.runtime import Session
from harness_run.spec import GitOptions
from harness_run.store import SqliteStore
from harness_run.testing import Rule, ScriptedModel, shell, text

from ._helpers import MODEL, model_secrets, workspace_of
from .conftest import EngineFactory


def _steps(session: Session) -> list[str]:
    return [e.step for e in session.events() if isinstance(e, SetupEvent)]


def _git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True).stdout.strip()


@pytest.mark.harness
async def test_shared_workspace_turns_of_two_sessions_take_turns(
    model: ScriptedModel, make_engine: EngineFactory, workdir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    engine = make_engine()
    a = engine.start_session(SessionConfig(workspace=WorkspaceOptions(mode="shared")))
    b = engine.start_session({"workspace": {"mode": "shared"}})
    step = "echo {0}-start >> log.txt; sleep 1; echo {0}-end >> log.txt"
    model.add(
        Rule(match="work A", reply=shell(step.format("A"))),
        Rule(match="work B", reply=shell(step.format("B"))),
        Rule(match=None, reply=text("done"), tool_result=True),
    )
    secrets = model_secrets(model)
    ra, rb = await asyncio.gather(a.run("work A", secrets=secrets), b.run("work B", secrets=secrets))
    assert not ra.is_error and not rb.is_error, (ra.error, rb.error)
    shared = workdir / "shared" / "rt" / "_default" / "workspace"
    lines = (shared / "log.txt").read_text().split()
    first = lines[0][0]
    second = "B" if first == "A" else "A"
    # serialized: one turn's shell ran start to end before the other's began
    assert lines == [f"{first}-start", f"{first}-end", f"{second}-start", f"{second}-end"]
    waited, ran_first = (b, a) if first == "A" else (a, b)
    waits = [s for s in _steps(waited) if s.startswith("waiting for the workspace")]
    assert len(waits) == 1 and f"session {ran_first.session_id}" in waits[0], _steps(waited)
    assert not any(s.startswith("waiting") for s in _steps(ran_first))
    assert not (workdir / "sessions" / a.session_id / "workspace").exists()  # no workspace of its own
    # deleting one session leaves the shared workspace to the other
    a.delete()
    assert (shared / "log.txt").exists() and not (workdir / "sessions" / a.session_id).exists()
    # retention: the idle shared workspace is listed and pruned like a session's
    engine.close()
    prune = ["sessions", "prune", "--workdir", str(workdir), "--older-than", "0s"]
    assert main(prune) == 0 and "would remove shared:rt/_default" in capsys.readouterr().out
    assert main([*prune, "--yes"]) == 0
    assert not shared.parent.exists()


def _repo_files(count: int) -> dict[str, str]:
    files = {f"src/f{i:04d}.txt": f"{i} {uuid.uuid4().hex * 8}\n" for i in range(count)}
    return {**files, ".gitignore": ".cache/\n", "README.md": "app\n"}


@pytest.mark.harness
async def test_a_new_session_on_a_branch_takes_over_the_idle_workspace_without_cloning(
    model: ScriptedModel, workdir: Path, tmp_path: Path
) -> None:
    token = f"repo-canary-{uuid.uuid4().hex[:12]}"
    bare = make_bare_repo(tmp_path / "srv", "app", _repo_files(300))
    with GitHttpServer(tmp_path / "srv", token) as server:
        spec = AgentSpec(
            name="pool",
            harness="claude-code",
            model=MODEL,
            repos=[RepoSource.git(f"{server.url}/app.git", auth="GH_TOKEN")],
            git=GitOptions(commit="after_turn", push=True),
        )
        engine = local.deploy(spec, workdir=workdir, pool_after=0)
        secrets = {**model_secrets(model), "GH_TOKEN": token}
        model.add(
            Rule(
                match="first",
                reply=shell("echo a > app/a.txt && mkdir -p app/.cache && echo warm > app/.cache/deps"),
            ),
            Rule(match="second", reply=shell("cat app/a.txt app/.cache/deps")),
            Rule(match="again", reply=shell("ls app")),
            Rule(match=None, reply=text("done"), tool_result=True),
        )
        first = engine.start_session(branch="feat/x", base_branch="main")
        r1 = await first.run("first", secrets=secrets)
        assert not r1.is_error and r1.pushed_ref == "refs/heads/feat/x", r1.error
        cloned = server.upload_pack_bytes
        git_dir = workspace_of(engine, first.session_id) / "app" / ".git"
        inode = git_dir.stat().st_ino

        second = engine.start_session(branch="feat/x")
        r2 = await second.run("second", secrets=secrets)
        assert not r2.is_error, r2.error
        steps = _steps(second)
        assert any(f"reusing the idle workspace of session {first.session_id}" in s for s in steps), steps
        assert not any(s.startswith("cloning") for s in steps), steps
        mine = workspace_of(engine, second.session_id)
        assert (mine / "app" / ".git").stat().st_ino == inode  # the same checkout, moved
        assert (mine / "app" / ".cache" / "deps").read_text() == "warm\n"  # warm: ignored files stay
        assert _git(mine / "app", "rev-parse", "HEAD") == _git(bare, "rev-parse", "feat/x")
        assert not workspace_of(engine, first.session_id).exists()
        fetched = server.upload_pack_bytes - cloned
        assert fetched * 20 < cloned, (fetched, cloned)  # a fetch of nothing new, not a clone

        assert {r.session_id for r in engine.sessions(branch="feat/x")} == {
            first.session_id,
            second.session_id,
        }
        assert all(r.branch == "feat/x" for r in engine.sessions(branch="feat/x"))
        assert engine.sessions(branch="feat/other") == []
        assert len(engine.sessions()) == 2

        # the first session goes on: its repo is cloned again (its work is on the remote)
        r3 = await first.run("again", secrets=secrets)
        assert not r3.is_error, r3.error
        assert any(s.startswith("cloning") for s in _steps(first))
        assert (workspace_of(engine, first.session_id) / "app" / "a.txt").read_text() == "a\n"
        engine.close()


@contextlib.contextmanager
def _pool_repo(model: ScriptedModel, tmp_path: Path) -> Iterator[tuple[AgentSpec, dict[str, str]]]:
    """A one-file repo behind the token-checking git server; a spec on it and the turn secrets."""
    token = f"repo-canary-{uuid.uuid4().hex[:12]}"
    make_bare_repo(tmp_path / "srv", "app", {"README.md": "app\n"})
    with GitHttpServer(tmp_path / "srv", token) as server:
        spec = AgentSpec(
            name="pool",
            harness="claude-code",
            model=MODEL,
            repos=[RepoSource.git(f"{server.url}/app.git", auth="GH_TOKEN")],
        )
        yield spec, {**model_secrets(model), "GH_TOKEN": token}


@pytest.mark.harness
async def test_a_workspace_with_unsaved_work_or_in_recent_use_is_not_lent(
    model: ScriptedModel, workdir: Path, tmp_path: Path
) -> None:
    with _pool_repo(model, tmp_path) as (spec, secrets):
        model.add(
            Rule(match="dirty", reply=shell("echo unsaved > app/draft.txt")),
            Rule(match=None, reply=text("done"), tool_result=True),
            Rule(match="look", reply=text("looked")),
        )
        eager = local.deploy(spec, workdir=workdir, pool_after=0)
        dirty = eager.start_session(branch="main")
        assert not (await dirty.run("dirty", secrets=secrets)).is_error
        other = eager.start_session(branch="main")
        assert not (await other.run("look", secrets=secrets)).is_error
        assert any(s.startswith("cloning") for s in _steps(other))  # an uncommitted file: kept
        assert (workspace_of(eager, dirty.session_id) / "app" / "draft.txt").read_text() == "unsaved\n"
        eager.close()

        patient = local.deploy(spec, workdir=workdir)  # default pool_after: 60 s
        third = patient.start_session(branch="main")
        assert not (await third.run("look", secrets=secrets)).is_error
        assert any(s.startswith("cloning") for s in _steps(third))  # `other` was idle for < 60 s
        assert workspace_of(patient, other.session_id).exists()
        patient.close()


@pytest.mark.harness
async def test_two_new_sessions_racing_for_one_idle_workspace_one_takes_it_the_other_clones(
    model: ScriptedModel, workdir: Path, tmp_path: Path
) -> None:
    with _pool_repo(model, tmp_path) as (spec, secrets):
        model.add(Rule(match="look", reply=text("looked")))
        engine = local.deploy(spec, workdir=workdir, pool_after=0)
        donor = engine.start_session()
        assert not (await donor.run("look", secrets=secrets)).is_error
        a, b = engine.start_session(), engine.start_session()
        ra, rb = await asyncio.gather(a.run("look", secrets=secrets), b.run("look", secrets=secrets))
        assert not ra.is_error and not rb.is_error, (ra.error, rb.error)
        took = [s for s in (a, b) if any(f"session {donor.session_id}" in x for x in _steps(s))]
        cloned = [s for s in (a, b) if any(x.startswith("cloning") for x in _steps(s))]
        assert len(took) == 1 and len(cloned) == 1 and took != cloned, (_steps(a), _steps(b))
        assert (workspace_of(engine, a.session_id) / "app" / "README.md").exists()
        assert (workspace_of(engine, b.session_id) / "app" / "README.md").exists()
        engine.close()


@pytest.mark.harness
async def test_a_host_directory_is_used_in_place_and_survives_delete_and_prune(
    model: ScriptedModel, make_engine: EngineFactory, workdir: Path, tmp_path: Path
) -> None:
    project = tmp_path / "project"
    project.mkdir()
    (project / "README.md").write_text("mine\n")
    engine = make_engine(checkpoint=True)
    session = engine.start_session(
        SessionConfig(workspace=WorkspaceOptions(host_dir=str(project / ".." / "project")))
    )
    assert session.record.config["workspace"]["host_dir"] == str(project)  # resolved when it starts
    model.add(shell("cat README.md > seen.txt && echo made > made.txt"), text("done"))
    result = await session.run("work", secrets=model_secrets(model))
    assert not result.is_error, result.error
    assert (project / "made.txt").read_text() == "made\n" and (project / "seen.txt").read_text() == "mine\n"
    assert session.record.snapshot is not None and session.record.snapshot.workspace is None  # not copied
    assert main(["sessions", "prune", "--workdir", str(workdir), "--older-than", "0s", "--yes"]) == 0
    assert sorted(p.name for p in project.iterdir()) == ["README.md", "made.txt", "seen.txt"]
    session.delete()
    assert sorted(p.name for p in project.iterdir()) == ["README.md", "made.txt", "seen.txt"]
    assert not (workdir / "sessions" / session.session_id).exists()


def test_host_directories_that_cannot_be_workspaces_are_refused(
    make_engine: EngineFactory, workdir: Path, tmp_path: Path
) -> None:
    engine = make_engine()
    a_file = tmp_path / "file.txt"
    a_file.write_text("x")
    (workdir / "sessions").mkdir(exist_ok=True)
    cases = {
        "/": "root directory",
        str(Path.home()): "home directory itself",
        "~": "home directory itself",
        str(tmp_path / "missing"): "does not exist",
        str(a_file): "is a file",
        str(workdir): "overlaps harness-run's workdir",
        str(tmp_path): "overlaps harness-run's workdir",  # holds the workdir
        str(workdir / "sessions"): "overlaps harness-run's workdir",
    }
    for host_dir, why in cases.items():
        with pytest.raises(UsageError, match=r"workspace\.host_dir") as caught:
            engine.start_session({"workspace": {"host_dir": host_dir}})
        assert why in str(caught.value), (host_dir, str(caught.value))
    assert engine.list_sessions() == []  # nothing stored for a refused session
    with pytest.raises(SpecError) as bad:
        WorkspaceOptions(host_dir="  ")
    assert bad.value.issues[0].path == "host_dir"
    with pytest.raises(SpecError) as bad:
        SessionConfig.from_dict({"workspace": {"mode": "pooled"}})
    assert bad.value.issues[0].path == "workspace.mode"


def test_the_sandbox_runtime_refuses_host_directories_and_takes_shared_workspaces(tmp_path: Path) -> None:
    from harness_run import sandbox
    from harness_run.store import EngineRecord

    spec = AgentSpec(name="remote", harness="claude-code", model=MODEL)
    store = SqliteStore(tmp_path / "store")
    store.put_engine(EngineRecord(name="remote", version="d" * 64, spec=spec.to_dict(), runtime="sandbox"))
    engine = sandbox.get_engine("remote", project="my-project", location="us-central1", store=store)
    with pytest.raises(UsageError, match=r"workspace.host_dir .* not available on the sandbox runtime"):
        engine.start_session({"workspace": {"host_dir": str(tmp_path)}})
    assert engine.list_sessions() == []
    shared = engine.start_session({"workspace": {"mode": "shared"}})  # one sandbox per branch
    assert [s.session_id for s in engine.list_sessions()] == [shared.session_id]
    engine.close()
    store.close()


def test_prune_takes_its_retention_from_harness_run_workspace_ttl(
    make_engine: EngineFactory,
    workdir: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    engine = make_engine()
    session = engine.start_session()
    folder = workdir / "sessions" / session.session_id
    (folder / "workspace").mkdir(parents=True)
    engine.store.put_session(session.record.model_copy(update={"updated_at": time.time() - 2 * 3600}))
    prune = ["sessions", "prune", "--workdir", str(workdir)]
    monkeypatch.setenv("HARNESS_RUN_WORKSPACE_TTL", "3h")
    assert main(prune) == 0
    assert "no local workspace idle for 3h" in capsys.readouterr().out
    monkeypatch.setenv("HARNESS_RUN_WORKSPACE_TTL", "1h")
    assert main(prune) == 0 and f"would remove {session.session_id}" in capsys.readouterr().out
    assert main([*prune, "--older-than", "3h"]) == 0 and session.session_id not in capsys.readouterr().out
    monkeypatch.setenv("HARNESS_RUN_WORKSPACE_TTL", "soon")
    assert main(prune) != 0
    assert "HARNESS_RUN_WORKSPACE_TTL 'soon' is not a duration" in capsys.readouterr().err
    monkeypatch.setenv("HARNESS_RUN_WORKSPACE_TTL", "1h")
    assert main([*prune, "--yes"]) == 0 and not folder.exists()
    assert os.path.isdir(workdir)
