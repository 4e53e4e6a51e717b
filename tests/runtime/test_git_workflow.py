"""Sessions on branches whose work goes back as commits: branch checkout and creation from a base,
commit and push after each turn (author, parent, message), a rejected push kept locally, and the
repo token nowhere on disk, in the store or in events. Real git smart-HTTP server, real CLI turns."""

from __future__ import annotations

import asyncio
import json
import subprocess
import uuid
from pathlib import Path

import pytest
from testkit.git_http import GitHttpServer, make_bare_repo

from harness_run import RepoSource
from harness_run.cli import main
from harness_run.errors import SessionBusyError, UsageError
from harness_run.spec import GitOptions
from harness_run.store import SqliteStore
from harness_run.testing import Rule, ScriptedModel, shell, text

from ._helpers import model_secrets, workspace_of
from .conftest import EngineFactory
from .test_secrets import store_contents

AUTHOR = "Ada Bot <ada@example.com>"


def _git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True).stdout.strip()


def _files_holding(workdir: Path, value: bytes) -> list[str]:
    """Files under the workdir (workspaces, .git dirs, store, blobs and inside snapshots) holding value."""
    leaks = [str(p) for p in workdir.rglob("*") if p.is_file() and value in p.read_bytes()]
    return leaks + [k for k, v in store_contents(workdir).items() if value in v]


@pytest.mark.harness
async def test_two_sessions_on_two_branches_push_their_commits_and_the_token_stays_out(
    model: ScriptedModel,
    make_engine: EngineFactory,
    workdir: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    token = f"repo-canary-{uuid.uuid4().hex[:12]}"
    bare = make_bare_repo(tmp_path / "srv", "app", {"README.md": "app\n"})
    _git(bare, "branch", "feat/existing", "main")
    main_sha = _git(bare, "rev-parse", "main")
    with GitHttpServer(tmp_path / "srv", token) as server:
        engine = make_engine(
            repos=[RepoSource.git(f"{server.url}/app.git", auth="GH_TOKEN", depth=1)],
            git=GitOptions(commit="after_turn", push=True, author=AUTHOR, message="{branch}: turn {turn}"),
            checkpoint=True,
        )
        new = engine.start_session(branch="feat/new", base_branch="main")
        old = engine.start_session(branch="feat/existing")
        model.add(
            Rule(match="work A", reply=shell("echo a > app/a.txt")),
            Rule(match="work B", reply=shell("echo b > app/b.txt")),
            text("done"),
            text("done"),
        )
        secrets = {**model_secrets(model), "GH_TOKEN": token}
        ra, rb = await asyncio.gather(new.run("work A", secrets=secrets), old.run("work B", secrets=secrets))
        assert not ra.is_error and not rb.is_error, (ra.error, rb.error)
        assert (ra.pushed_ref, rb.pushed_ref) == ("refs/heads/feat/new", "refs/heads/feat/existing")
        for result, branch, file in ((ra, "feat/new", "a.txt"), (rb, "feat/existing", "b.txt")):
            assert _git(bare, "rev-parse", branch) == result.commit_sha
            shown = _git(bare, "log", "-1", "--format=%an <%ae>|%P|%s", branch)
            assert shown == f"{AUTHOR}|{main_sha}|{branch}: turn 1"
            assert _git(bare, "show", f"{branch}:{file}") == file[0]
        assert _git(bare, "rev-parse", "main") == main_sha  # the base is untouched
        again = engine.get_session(new.session_id)
        assert again.record.last_result is not None
        assert again.record.last_result.commit_sha == ra.commit_sha  # the session record carries it
        events = new.events() + old.events()
        transcript = new.transcript()
    markdown = transcript.to_markdown()
    assert "**User:** work A" in markdown and "app/a.txt" in markdown and "**Assistant:** done" in markdown
    assert f"commit {(ra.commit_sha or '')[:12]}" in markdown
    native = b"".join(transcript.native.values())  # Claude Code's own session file, from the checkpoint
    assert list(transcript.native) == [f"{new.session_id}.jsonl"] and b"work A" in native
    assert main(["history", new.session_id, "--format", "md", "--workdir", str(workdir)]) == 0
    assert markdown in capsys.readouterr().out
    assert main(["history", new.session_id, "--format", "json", "--workdir", str(workdir)]) == 0
    portable = json.loads(capsys.readouterr().out)
    assert portable["entries"][0] == {"turn": 1, "role": "user", "text": "work A"}
    assert token.encode() not in native and token not in markdown
    assert _files_holding(workdir, token.encode()) == []
    assert all(token not in e.model_dump_json() for e in events)


@pytest.mark.harness
async def test_a_rejected_push_is_a_clear_error_the_commit_stays_and_delete_leaves_nothing(
    model: ScriptedModel, make_engine: EngineFactory, workdir: Path, tmp_path: Path
) -> None:
    token = f"repo-canary-{uuid.uuid4().hex[:12]}"
    bare = make_bare_repo(tmp_path / "srv", "app", {"README.md": "app\n"})
    with GitHttpServer(tmp_path / "srv", token) as server:
        engine = make_engine(
            repos=[RepoSource.git(f"{server.url}/app.git", auth="GH_TOKEN")],
            git={"commit": "after_turn", "push": True},
            checkpoint=True,
            secrets=["AGENT_SECRET"],
        )
        agent_value = f"agent-canary-{uuid.uuid4().hex[:12]}"
        secrets = {**model_secrets(model), "GH_TOKEN": token, "AGENT_SECRET": agent_value}
        missing = await engine.start_session(branch="feat/nowhere").run("hi", secrets=secrets)
        assert missing.is_error and "feat/nowhere" in (missing.error or "")
        assert "base_branch" in (missing.error or "")

        session = engine.start_session(branch="feat/race", base_branch="main")
        model.add(shell("echo 1 > app/one.txt"), text("done"), shell("echo 2 > app/two.txt"), text("done"))
        first = await session.run("one", secrets=secrets)
        assert first.pushed_ref == "refs/heads/feat/race", first.error
        # someone else pushes to the branch meanwhile: ours is no longer a fast-forward
        theirs = _git(
            bare,
            "-c",
            "user.name=o",
            "-c",
            "user.email=o@o",
            "commit-tree",
            "main^{tree}",
            "-p",
            "main",
            "-m",
            "x",
        )
        _git(bare, "update-ref", "refs/heads/feat/race", theirs)
        second = await session.run("two", secrets=secrets)
        assert second.is_error and second.pushed_ref is None
        assert "push" in (second.error or "") and "feat/race" in (second.error or "")
        assert token not in (second.error or "")
        repo = workspace_of(engine, session.session_id) / "app"
        assert second.commit_sha is not None
        assert _git(repo, "rev-parse", "HEAD") == second.commit_sha  # nothing lost
        assert _git(repo, "log", "-1", "--format=%an", second.commit_sha) == "harness-run"

        sid = session.session_id
        model.add(shell('echo "$AGENT_SECRET" > app/leak.txt; echo ok > app/fine.txt'), text("done"))
        run = session.run("three", secrets=secrets)
        with pytest.raises(SessionBusyError, match="running a turn"):
            session.delete()
        third = await run
        assert third.is_error and "['leak.txt'] hold a secret value" in (third.error or "")
        assert agent_value not in (third.error or "") and "fine.txt" in _git(repo, "show", "--stat", "HEAD")
        assert agent_value not in _git(repo, "log", "--all", "-p")  # never committed
        assert [p for p in (workdir / "blobs").rglob("*") if p.is_file()]  # checkpoints to remove
        session.delete()
        assert not (workdir / "sessions" / sid).exists()
        assert engine.store.get_session(sid) is None and engine.store.list_turns(sid) == []
        assert engine.store.read_events(sid) == []
        assert [p for p in (workdir / "blobs").rglob("*") if p.is_file()] == []  # its checkpoints too
        with pytest.raises(UsageError, match="deleted"):
            session.run("four", secrets=secrets)


@pytest.mark.harness
async def test_on_close_commits_and_pushes_when_the_engine_closes_and_prune_removes_it(
    model: ScriptedModel,
    make_engine: EngineFactory,
    workdir: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    token = f"repo-canary-{uuid.uuid4().hex[:12]}"
    bare = make_bare_repo(tmp_path / "srv", "app", {"README.md": "app\n"})
    with GitHttpServer(tmp_path / "srv", token) as server:
        engine = make_engine(repos=[RepoSource.git(f"{server.url}/app.git", auth="GH_TOKEN")])
        session = engine.start_session(
            {"git": {"commit": "on_close", "push": True, "message": "closing {session_id}"}},
            branch="feat/close",
            base_branch="main",
        )
        model.add(shell("echo c > app/c.txt"), text("done"))
        result = await session.run("work", secrets={**model_secrets(model), "GH_TOKEN": token})
        assert not result.is_error and result.commit_sha is None  # not yet: on close
        assert "feat/close" not in _git(bare, "branch", "--list")
        await engine.aclose()
        assert _git(bare, "show", "feat/close:c.txt") == "c"
        assert _git(bare, "log", "-1", "--format=%s", "feat/close") == f"closing {session.session_id}"
        again = make_engine(repos=[RepoSource.git(f"{server.url}/app.git", auth="GH_TOKEN")])
        record = again.get_session(session.session_id).record
        assert record.commit_sha == _git(bare, "rev-parse", "feat/close")
        assert record.pushed_ref == "refs/heads/feat/close"
        again.close()
    sid, folder = session.session_id, workdir / "sessions" / session.session_id
    prune = ["sessions", "prune", "--workdir", str(workdir)]
    assert main([*prune, "--older-than", "1h"]) == 0 and sid not in capsys.readouterr().out  # not idle yet
    assert main([*prune, "--older-than", "0s"]) == 0 and f"would remove {sid}" in capsys.readouterr().out
    assert folder.is_dir()  # a dry run by default
    assert main([*prune, "--older-than", "0s", "--history", "--yes"]) == 0
    assert not folder.exists()
    store = SqliteStore(workdir)
    assert store.get_session(sid) is None and store.list_turns(sid) == []
    store.close()
