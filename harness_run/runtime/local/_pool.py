"""Branch pooling: a new session on a (remote, branch) takes over the idle workspace of an earlier
session on it instead of cloning (warm: dependencies, build output and ignored files stay).

A workspace is *idle* — lendable — when all of these hold:

- no turn runs in it (its workspace lock is free, and its session's stored status is not
  ``running``);
- its session's last change (end of its last turn, or its start) is at least ``pool_after``
  seconds old (``LocalEngine(pool_after=)``, default 60 s; 0: as soon as a turn ends);
- nothing in it would be lost: every repo's working tree is clean (``git status --porcelain``
  empty; ignored files do not count) and its HEAD is on the remote (reachable from a
  remote-tracking ref, or the head of a remote branch).

The key is the engine's name, its repos (URL, ref, depth, folder), the session's branch and the
setup script: only a workspace prepared the same way is lent. Taking one is a rename under its lock
(one winner across processes); the repos are then fetched and reset to the remote's branch (or
its base) and cleaned of untracked files. The earlier session keeps its history; its next turn
restores its checkpoint or clones again.

With an agent uid per session (``serve``), the earlier session's checkout is checked as its agent
and, once taken, handed over to the new session's agent and refreshed as it (``_git.AgentGit``):
git never runs over an agent's repo as this process.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from collections.abc import Callable, Mapping
from pathlib import Path

from harness_run.errors import RunError, redact
from harness_run.runtime._workspace import WorkspaceLock
from harness_run.runtime.local._git import AgentGit, git_env, run_git
from harness_run.runtime.local._workspace import SessionPaths
from harness_run.spec import AgentSpec, GitRepo
from harness_run.store import SessionRecord

__all__ = ["DEFAULT_POOL_AFTER", "pool_key", "refresh_repo", "take_idle_workspace"]

DEFAULT_POOL_AFTER = 60.0


def pool_key(engine: str, spec: AgentSpec, branch: str | None, owner: str | None = None) -> str:
    """What a lendable workspace must have been prepared for (see the module docstring). ``owner``:
    the team-server key that owns the session — a warm workspace (with whatever its agent left in
    ignored files) is only ever lent to a session of the same key."""
    body: dict[str, object] = {
        "engine": engine,
        "repos": [[r.url, r.ref, r.depth, r.dir_name] for r in spec.repos],
        "branch": branch,
        "setup": spec.setup_script,
    }
    if owner is not None:
        body["owner"] = owner
    return hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()[:24]


def _nothing_to_lose(target: Path, repo: GitRepo, secrets: Mapping[str, str], agent: AgentGit | None) -> bool:
    """The checkout is clean and its HEAD is on the remote (git as its session's ``agent``)."""
    if not (target / ".git").exists():
        return False
    env = git_env(secrets, repo)
    status = run_git(target, env, "status", "--porcelain", agent=agent)
    if status.returncode != 0 or status.stdout.strip():
        return False
    head = run_git(target, env, "rev-parse", "HEAD", agent=agent).stdout.strip()
    if not head:
        return False
    unpushed = run_git(target, env, "rev-list", "-n", "1", head, "--not", "--remotes", agent=agent)
    if unpushed.returncode == 0 and not unpushed.stdout.strip():
        return True
    remote = run_git(target, env, "ls-remote", "--heads", "origin", agent=agent)
    return remote.returncode == 0 and any(line.split("\t")[0] == head for line in remote.stdout.splitlines())


def take_idle_workspace(
    workdir: Path,
    key: str,
    paths: SessionPaths,
    spec: AgentSpec,
    secrets: Mapping[str, str],
    record_of: Callable[[str], SessionRecord | None],
    pool_after: float,
    agent_of: Callable[[str], AgentGit | None] = lambda _session: None,
) -> str | None:
    """Move an idle workspace with ``key`` into ``paths`` (whose workspace must not exist yet);
    returns the session it came from, or None when there is none (blocking). ``agent_of(session)``:
    who git runs as in that session's checkouts (None: this process)."""
    now = time.time()
    root = workdir / "sessions"
    for folder in sorted(root.iterdir()) if root.is_dir() else []:
        if folder == paths.root or not (folder / "workspace").is_dir():
            continue
        try:
            if (folder / ".pool-key").read_text().strip() != key:
                continue
        except OSError:
            continue
        lock = WorkspaceLock(folder / ".workspace.lock", f"session {paths.root.name} (taking it over)")
        if not lock.try_acquire():
            continue  # a turn runs in it
        try:
            if not (folder / "workspace").is_dir():
                continue  # taken by someone else meanwhile
            record = record_of(folder.name)
            last = record.updated_at if record is not None else folder.stat().st_mtime
            if (record is not None and record.status == "running") or now - last < pool_after:
                continue
            agent = agent_of(folder.name)
            workspace = folder / "workspace"
            if not all(_nothing_to_lose(workspace / r.dir_name, r, secrets, agent) for r in spec.repos):
                continue
            paths.root.mkdir(mode=0o700, parents=True, exist_ok=True)
            os.rename(folder / "workspace", paths.workspace)
            if (folder / ".setup-done").exists():
                os.replace(folder / ".setup-done", paths.setup_marker)
            (folder / ".pool-key").unlink(missing_ok=True)
            return folder.name
        finally:
            lock.release()
    return None


def refresh_repo(
    target: Path,
    repo: GitRepo,
    secrets: Mapping[str, str],
    branch: tuple[str, str | None] | None,
    agent: AgentGit | None = None,
) -> str:
    """Bring a lent checkout to the remote's state: fetch the session's branch (else its base, for a
    branch not pushed yet; else the repo's ref), reset to it, remove untracked files (ignored ones
    stay: they are what makes the workspace warm). Returns the commit; RunError when it fails.
    ``agent``: the new session's agent, who owns the checkout now (git runs as it)."""
    env = git_env(secrets, repo)
    depth = [f"--depth={repo.depth}"] if repo.depth else []
    candidates = [branch[0], *([branch[1]] if branch[1] else [])] if branch else [repo.ref or "HEAD"]
    errors: list[str] = []
    for ref in candidates:
        fetched = run_git(target, env, "fetch", "-q", *depth, "origin", ref, agent=agent)
        if fetched.returncode == 0:
            break
        errors.append(fetched.stderr.strip())
    else:
        raise RunError(f"cannot fetch {candidates} of {repo.url}: {redact('; '.join(errors), secrets)}")
    for args in (("reset", "-q", "--hard", "FETCH_HEAD"), ("clean", "-fdq")):
        done = run_git(target, env, *args, agent=agent)
        if done.returncode != 0:
            raise RunError(f"git {args[0]} in {target} failed: {redact(done.stderr.strip(), secrets)}")
    return run_git(target, env, "rev-parse", "HEAD", agent=agent).stdout.strip()
