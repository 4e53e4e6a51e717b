"""A session's branch and its work going back to the remote: branch checkout (or creation from a
base), commit and push. Git runs as a subprocess with the repo token in its environment only
(``GIT_CONFIG_*``, see :func:`harness_run.security.git_auth_env`): never argv, never ``.git/config``.

When the session's agent runs as a uid of its own (``agent_user``, ``serve --agent-uids``), the
repo is the agent's: git in it runs as the agent too (:class:`AgentGit`), never as this process.
Git refuses a repo of another owner, and trusting it (``safe.directory``) would run what the
agent's ``.git/config`` names — ``core.fsmonitor``, filter drivers, hooks, ``core.sshCommand`` —
with this process's privileges. As the agent, git can do no more than the agent itself: the repo
token it gets is the one the agent's own git gets during a turn (from the git broker).
"""

from __future__ import annotations

import os
import stat
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from harness_run.errors import RunError, redact
from harness_run.runtime._agent_user import AgentUser
from harness_run.spec import GitOptions, GitRepo

__all__ = ["AgentGit", "Delivery", "branch_exists", "deliver", "git_env", "run_git"]

_SCAN_LIMIT: Final = 64 << 20
"""Bytes of a staged file searched for secret values (a larger one is searched this far)."""


@dataclass(frozen=True, slots=True)
class AgentGit:
    """Git in a session's repo runs as its agent: ``user``, with ``home`` (the session's harness
    home, the agent's own) as ``$HOME`` — this process's home is not the agent's to read."""

    user: AgentUser
    home: Path

    def env(self, env: Mapping[str, str]) -> dict[str, str]:
        out = {k: v for k, v in env.items() if k != "XDG_CONFIG_HOME"}
        out["HOME"] = str(self.home)
        return out


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


def run_git(
    cwd: Path | None, env: Mapping[str, str], *args: str, agent: AgentGit | None = None
) -> subprocess.CompletedProcess[str]:
    """``git args`` in ``cwd`` with ``env`` (as ``agent``'s user when given; never raises for
    git's exit status)."""
    if agent is None:
        return subprocess.run(
            ["git", *args], cwd=cwd, env=dict(env), capture_output=True, text=True, check=False
        )
    return subprocess.run(
        ["git", *args],
        cwd=cwd,
        env=agent.env(env),
        capture_output=True,
        text=True,
        check=False,
        **agent.user.spawn_kwargs(),
    )


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
    agent: AgentGit | None = None,
) -> Delivery:
    """Commit every change in ``target`` (files holding a secret value are left out and named in
    the error) and, with ``options.push``, push HEAD to ``branch`` (default: the checked-out one).
    ``agent``: the repo is the session's agent's; git runs as it (see the module docstring)."""
    if not (target / ".git").exists():
        return Delivery(
            error=f"{target.name} is no git checkout any more (the agent removed it?); nothing committed"
        )
    env = git_env(secrets, repo)

    def git(cwd: Path, env: Mapping[str, str], *args: str) -> subprocess.CompletedProcess[str]:
        return run_git(cwd, env, *args, agent=agent)

    author = {
        "GIT_AUTHOR_NAME": options.author_name,
        "GIT_AUTHOR_EMAIL": options.author_email,
        "GIT_COMMITTER_NAME": options.author_name,
        "GIT_COMMITTER_EMAIL": options.author_email,
    }
    added = git(target, env, "add", "-A")
    if added.returncode != 0:  # e.g. a repo the agent gave away: nothing of it is committed
        return Delivery(error=f"git add in {target.name} failed: {redact(added.stderr.strip(), forms)}")
    held = _files_with_secrets(target, env, forms, agent)
    if held:
        git(target, env, "reset", "-q", "--", *held)
    errors = [f"not committed: {held} hold a secret value; remove it from them"] if held else []
    sha: str | None = None
    staged = git(target, env, "diff", "--cached", "--quiet")
    if staged.returncode not in (0, 1):
        return Delivery(error=f"git diff in {target.name} failed: {redact(staged.stderr.strip(), forms)}")
    if staged.returncode == 1:
        done = git(target, {**env, **author}, "commit", "-q", "--no-verify", "-m", message)
        if done.returncode != 0:
            return Delivery(error=f"git commit failed: {redact(done.stderr.strip(), forms)}")
        sha = git(target, env, "rev-parse", "HEAD").stdout.strip()
    pushed: str | None = None
    if options.push:
        branch = branch or git(target, env, "rev-parse", "--abbrev-ref", "HEAD").stdout.strip()
        ref = f"refs/heads/{branch}"
        done = git(target, env, "push", "-q", "origin", f"HEAD:{ref}")
        if done.returncode == 0:
            pushed = ref
        else:
            head = git(target, env, "rev-parse", "--short", "HEAD").stdout.strip()
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


def _files_with_secrets(
    target: Path, env: Mapping[str, str], forms: list[str], agent: AgentGit | None
) -> list[str]:
    if not forms:
        return []
    staged = run_git(target, env, "diff", "--cached", "--name-only", "-z", "--diff-filter=d", agent=agent)
    held: list[str] = []
    for rel in filter(None, staged.stdout.split("\0")):
        data = _staged_bytes(target / rel)
        if any(f.encode() in data for f in forms) or any(f in rel for f in forms):
            held.append(rel)
    return held


def _staged_bytes(path: Path) -> bytes:
    """What git stores for ``path``: a link's target, a regular file's bytes (the first
    :data:`_SCAN_LIMIT`). Never follows a link nor opens a device or FIFO: the agent may have
    staged a link to a file of this process's, or to ``/dev/zero``."""
    try:
        if path.is_symlink():
            return os.readlink(path).encode()
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return b""
    with os.fdopen(fd, "rb") as handle:
        if not stat.S_ISREG(os.fstat(handle.fileno()).st_mode):
            return b""
        return handle.read(_SCAN_LIMIT)
