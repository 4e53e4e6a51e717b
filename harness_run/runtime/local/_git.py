"""A session's branch and its work going back to the remote: branch checkout (or creation from a
base), commit and push. Git runs as a subprocess with the repo token in its environment only
(``GIT_CONFIG_*``, see :func:`harness_run.security.git_auth_env`): never argv, never ``.git/config``."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from harness_run.errors import RunError, redact
from harness_run.spec import GitOptions, GitRepo

__all__ = ["Delivery", "branch_exists", "deliver", "git_env", "run_git"]


@dataclass(frozen=True, slots=True)
class Delivery:
    """What committing (and pushing) a session's work did."""

    commit_sha: str | None = None
    """The commit made now (None: nothing had changed)."""
    pushed_ref: str | None = None
    """``refs/heads/<branch>`` when the push succeeded."""
    error: str | None = None
    """Why the work was not (all) committed or pushed; what was committed stays in the workspace."""


def git_env(secrets: Mapping[str, str], repo: GitRepo) -> dict[str, str]:
    """git's environment: this process's (no ``GIT_*``), plus the repo's token as git config."""
    from harness_run.security import git_auth_env

    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env["GIT_TERMINAL_PROMPT"] = "0"
    env.update(git_auth_env([repo], secrets))
    return env


def run_git(cwd: Path | None, env: Mapping[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    """``git args`` in ``cwd`` with ``env`` (never raises for git's exit status)."""
    return subprocess.run(["git", *args], cwd=cwd, env=dict(env), capture_output=True, text=True, check=False)


_git = run_git


def branch_exists(repo: GitRepo, branch: str, secrets: Mapping[str, str]) -> bool:
    """Whether the remote has ``refs/heads/<branch>`` (RunError when it cannot be asked)."""
    done = _git(None, git_env(secrets, repo), "ls-remote", "--heads", "--", repo.url, f"refs/heads/{branch}")
    if done.returncode != 0:
        raise RunError(
            f"cannot list the branches of {repo.url}: {redact(done.stderr.strip(), secrets)}; check the "
            f"URL and the {repo.auth or 'auth'} secret"
        )
    return bool(done.stdout.strip())


def deliver(
    target: Path,
    repo: GitRepo,
    options: GitOptions,
    *,
    message: str,
    branch: str | None,
    secrets: Mapping[str, str],
    forms: list[str],
) -> Delivery:
    """Commit every change in ``target`` (files holding a secret value are left out and named in
    the error) and, with ``options.push``, push HEAD to ``branch`` (default: the checked-out one)."""
    if not (target / ".git").exists():
        return Delivery(
            error=f"{target.name} is no git checkout any more (the agent removed it?); nothing committed"
        )
    env = git_env(secrets, repo)
    author = {
        "GIT_AUTHOR_NAME": options.author_name,
        "GIT_AUTHOR_EMAIL": options.author_email,
        "GIT_COMMITTER_NAME": options.author_name,
        "GIT_COMMITTER_EMAIL": options.author_email,
    }
    _git(target, env, "add", "-A")
    held = _files_with_secrets(target, env, forms)
    if held:
        _git(target, env, "reset", "-q", "--", *held)
    errors = [f"not committed: {held} hold a secret value; remove it from them"] if held else []
    sha: str | None = None
    if _git(target, env, "diff", "--cached", "--quiet").returncode == 1:
        done = _git(target, {**env, **author}, "commit", "-q", "--no-verify", "-m", message)
        if done.returncode != 0:
            return Delivery(error=f"git commit failed: {redact(done.stderr.strip(), forms)}")
        sha = _git(target, env, "rev-parse", "HEAD").stdout.strip()
    pushed: str | None = None
    if options.push:
        branch = branch or _git(target, env, "rev-parse", "--abbrev-ref", "HEAD").stdout.strip()
        ref = f"refs/heads/{branch}"
        done = _git(target, env, "push", "-q", "origin", f"HEAD:{ref}")
        if done.returncode == 0:
            pushed = ref
        else:
            head = _git(target, env, "rev-parse", "--short", "HEAD").stdout.strip()
            why = " ".join(
                line.strip()
                for line in done.stderr.splitlines()
                if line.strip() and not line.startswith("hint:")
            )
            errors.append(
                f"push of {head} to {branch} on {repo.url} failed ({redact(why, forms)}); "
                "the work is committed in the workspace — fetch and merge (or rebase) the branch and "
                "push again, or check the repo's auth secret"
            )
    return Delivery(commit_sha=sha, pushed_ref=pushed, error="; ".join(errors) or None)


def _files_with_secrets(target: Path, env: Mapping[str, str], forms: list[str]) -> list[str]:
    if not forms:
        return []
    staged = _git(target, env, "diff", "--cached", "--name-only", "-z", "--diff-filter=d").stdout
    held: list[str] = []
    for rel in filter(None, staged.split("\0")):
        try:
            data = (target / rel).read_bytes()
        except OSError:
            continue
        if any(f.encode() in data for f in forms) or any(f in rel for f in forms):
            held.append(rel)
    return held
