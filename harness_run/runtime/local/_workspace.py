"""Per-session workspaces on the local machine: dirs, repos, skills, package venvs, setup script,
and snapshots (tarballs) for checkpoint/restore."""

from __future__ import annotations

import asyncio
import fcntl
import hashlib
import io
import json
import os
import re
import shutil
import stat
import sys
import tarfile
from collections.abc import Callable, Generator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from harness_run.errors import BuildError, RunError, UsageError, redact
from harness_run.runtime._agent_user import AgentUser
from harness_run.runtime.local._agent_uids import UidRegistry
from harness_run.runtime.local._git import branch_exists
from harness_run.spec import AgentSpec, GitRepo
from harness_run.vocab.workdir import resolve_workdir

if TYPE_CHECKING:
    from harness_run.compiler import StagedFile

__all__ = ["SessionPaths", "Workspaces", "resolve_workdir"]

Progress = Callable[[str, str], None]


class SessionPaths:
    """Where a session's files are: ``root`` (``sessions/<id>``: its harness ``home``, markers) and
    its ``workspace`` — ``root/workspace`` of its own, a shared one (``shared/<engine>/<branch>/``)
    or a host directory. ``lock`` is the workspace's :class:`~harness_run.runtime._workspace.WorkspaceLock`
    file; ``own_workspace`` says whether the workspace is the session's alone (removed with it,
    lendable to a new session of the same (remote, branch))."""

    def __init__(
        self,
        root: Path,
        *,
        workspace: Path | None = None,
        lock: Path | None = None,
        setup_marker: Path | None = None,
    ) -> None:
        self.root = root
        self.own_workspace = workspace is None
        self.host_dir = lock is not None and setup_marker is None
        """The workspace is a directory of the host's (``workspace.host_dir``): used in place, never
        created, restored or deleted by harness-run."""
        self.workspace = workspace if workspace is not None else root / "workspace"
        self.home = root / "home"
        self.setup_marker = setup_marker if setup_marker is not None else root / ".setup-done"
        self.lock = lock if lock is not None else root / ".workspace.lock"
        self.pool_key = root / ".pool-key"

    def create(self) -> None:
        """The session's directories, the owner's only (0700): its home holds the harness's own
        transcripts, which may quote what the agent saw."""
        self.root.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        self.root.mkdir(mode=0o700, exist_ok=True)
        self.root.chmod(0o700)
        if self.host_dir and not self.workspace.is_dir():
            raise RunError(
                f"the session's workspace.host_dir {self.workspace} is gone; create it again, or start "
                "a new session with another directory"
            )
        self.workspace.mkdir(mode=0o700, parents=True, exist_ok=True)
        self.home.mkdir(mode=0o700, exist_ok=True)


def _slug(text: str) -> str:
    """A folder name for ``text`` (a branch): readable part + hash, so distinct names never collide."""
    readable = re.sub(r"[^A-Za-z0-9._-]+", "-", text).strip("-.")[:40] or "branch"
    return f"{readable}-{hashlib.sha256(text.encode()).hexdigest()[:8]}"


@contextmanager
def _file_lock(path: Path) -> Generator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


class Workspaces:
    """Everything on disk under one workdir: ``sessions/<id>/``, ``venvs/<hash>/``, ``skills/``."""

    def __init__(self, workdir: Path, agent_user: AgentUser | UidRegistry | None = None) -> None:
        self.workdir = workdir
        self._skill_cache: dict[str, dict[str, StagedFile]] = {}
        self._agent_user = agent_user

    def user_for(self, paths: SessionPaths) -> AgentUser | None:
        """The uid the session's agent runs as: ``agent_user``, except in a host directory (the
        user's own files, never handed over: there the agent keeps this process's uid); with a
        :class:`UidRegistry`, the session's own uid (a host directory is refused: the agent would
        run as this process)."""
        agent = self._agent_user
        if isinstance(agent, UidRegistry):
            if paths.host_dir:
                raise RunError(
                    f"session {paths.root.name} works in a host directory ({paths.workspace}), which "
                    "is not served with per-session agent uids; start a session without "
                    "workspace.host_dir"
                )
            return agent.user(paths.root.name)
        return None if paths.host_dir else agent

    def release_user(self, session_id: str) -> None:
        """The session is deleted: its agent uid is not used again (per-session uids only)."""
        if isinstance(self._agent_user, UidRegistry):
            self._agent_user.release(session_id)

    def check_host_dir(self, host_dir: str | None) -> None:
        """A new session's ``workspace.host_dir``: refused with per-session uids (see user_for)."""
        if host_dir is not None and isinstance(self._agent_user, UidRegistry):
            raise UsageError(
                "workspace.host_dir is not available here: each session's agent runs as a uid of its "
                "own and a host directory is not handed over to it; leave workspace.host_dir unset"
            )

    def paths(
        self, session_id: str, config: Mapping[str, Any] | None = None, engine: str = ""
    ) -> SessionPaths:
        """The session's paths; ``config`` is its stored ``SessionConfig`` (workspace mode, host
        directory, branch), ``engine`` its engine's name (shared workspaces are per engine)."""
        root = self.workdir / "sessions" / session_id
        raw: object = (config or {}).get("workspace")
        options: Mapping[str, object] = cast("Mapping[str, object]", raw) if isinstance(raw, Mapping) else {}
        host_dir = options.get("host_dir")
        if isinstance(host_dir, str):
            key = hashlib.sha256(host_dir.encode()).hexdigest()[:16]
            return SessionPaths(root, workspace=Path(host_dir), lock=self.workdir / "locks" / f"{key}.lock")
        if options.get("mode") == "shared":
            branch = (config or {}).get("branch")
            shared = (
                self.workdir / "shared" / engine / (_slug(branch) if isinstance(branch, str) else "_default")
            )
            return SessionPaths(
                root,
                workspace=shared / "workspace",
                lock=shared / ".lock",
                setup_marker=shared / ".setup-done",
            )
        return SessionPaths(root)

    # --- preparation (first turn, or after a restore) ---------------------------------------

    async def prepare(
        self,
        spec: AgentSpec,
        paths: SessionPaths,
        env: Mapping[str, str],
        secrets: Mapping[str, str],
        progress: Progress,
        skills_dir: Path,
        branch: tuple[str, str | None] | None = None,
    ) -> None:
        """``branch``: (branch, base_branch) for the first repo (see ``SessionConfig.branch``)."""
        paths.create()
        for index, repo in enumerate(spec.repos):
            target = paths.workspace / repo.dir_name
            if not target.exists() or (repo.dir_name == "." and not (target / ".git").exists()):
                progress("setup", f"cloning {repo.url}")
                await asyncio.to_thread(_clone, repo, target, secrets, branch if index == 0 else None)
        if spec.skills:
            progress("setup", f"staging {len(spec.skills)} skill source(s)")
            await asyncio.to_thread(self.stage_skills, spec, skills_dir)
        if spec.setup_script and not paths.setup_marker.exists():
            progress("setup", "running setup_script")
            user = self.user_for(paths)
            if user is not None:  # the setup script runs as the agent, in its files
                await asyncio.to_thread(user.hand_over, paths.workspace, paths.home)
            await _run_setup(spec.setup_script, paths, env, secrets, user)
            paths.setup_marker.write_text("ok\n")

    def stage_skills(self, spec: AgentSpec, dest_root: Path) -> None:
        """Write the spec's skills into ``<dest_root>/<name>/`` (where the harness looks for them).

        The files come from the compiler's staging (git skills read at their resolved commit), done
        once per workdir and skill set and kept in memory.
        """
        for rel, staged in self._staged_skills(spec).items():
            path = dest_root / rel.removeprefix("skills/")
            if path.exists():
                continue
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(staged.data)
            if staged.executable:
                path.chmod(0o755)

    def _staged_skills(self, spec: AgentSpec) -> dict[str, StagedFile]:
        key = json.dumps([s.model_dump(mode="json") for s in spec.skills], sort_keys=True)
        if key not in self._skill_cache:
            from harness_run.compiler import stage_skills

            self._skill_cache[key] = stage_skills(spec.skills, Path.cwd())[0]
        return self._skill_cache[key]

    # --- packages -----------------------------------------------------------------------------

    async def package_env(self, spec: AgentSpec, progress: Progress) -> Path | None:
        """A venv with ``spec.packages``, shared by content hash; returns its bin dir."""
        if not spec.packages:
            return None
        key = hashlib.sha256("\n".join(sorted(spec.packages)).encode()).hexdigest()[:16]
        venv = self.workdir / "venvs" / key
        marker = venv / ".harness-run-ready"
        if not marker.exists():
            progress("setup", f"installing {len(spec.packages)} package(s) into {venv}")
            await asyncio.to_thread(_make_venv, venv, sorted(spec.packages), marker)
        return venv / "bin"

    # --- snapshots ----------------------------------------------------------------------------

    @staticmethod
    def snapshot(root: Path, secret_values: list[str]) -> bytes:
        """A deterministic tarball of ``root`` with secret values blanked out of file contents."""
        buf = io.BytesIO()
        inside = root.resolve()
        with tarfile.open(fileobj=buf, mode="w:gz", compresslevel=1) as tar:
            for path in sorted(root.rglob("*")):
                rel = _blank(path.relative_to(root).as_posix(), secret_values)  # names may hold secrets too
                info = tar.gettarinfo(str(path), arcname=rel)
                info.linkname = _blank(info.linkname, secret_values)
                info.mtime, info.uid, info.gid, info.uname, info.gname = 0, 0, 0, "", ""
                if path.is_symlink() or path.is_dir():
                    tar.addfile(info)
                elif path.is_file():
                    data = _read_inside(path, inside)
                    if data is None:
                        continue  # swapped for a link or a device meanwhile: not the agent's file
                    for value in secret_values:
                        if value.encode() in data:
                            data = data.replace(value.encode(), b"***")
                    info.size = len(data)
                    tar.addfile(info, io.BytesIO(data))
        return buf.getvalue()

    @staticmethod
    def restore(data: bytes, root: Path) -> None:
        root.mkdir(parents=True, exist_ok=True)
        with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
            tar.extractall(root, filter="data")


def _read_inside(path: Path, inside: Path) -> bytes | None:
    """The content of the regular file ``path`` if it really is under ``inside`` (not through a link
    the agent swapped in after the listing: this may run as root over the agent's files)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    with os.fdopen(fd, "rb") as handle:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        if not Path(os.readlink(f"/proc/self/fd/{fd}")).is_relative_to(inside):
            return None
        return handle.read()


def _blank(text: str, secret_values: list[str]) -> str:
    for value in secret_values:
        text = text.replace(value, "***")
    return text


def _git_env(secrets: Mapping[str, str], repo: GitRepo) -> dict[str, str]:
    """The clone's environment: the token as git config through the environment (never a command
    line or ``.git/config``); every turn's agent environment carries the same, so it can push."""
    from harness_run.security import git_auth_env

    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env["GIT_TERMINAL_PROMPT"] = "0"
    env.update(git_auth_env([repo], secrets))
    return env


_URL_CREDENTIALS = re.compile(r"(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*://)(?P<userinfo>[^/@\s]*:[^/@\s]*)@")


def scrub_git_credentials(workspace: Path, spec: AgentSpec, forms: list[str]) -> list[Path]:
    """Take tokens out of the repos' git config (and the workspace's own) before anything is stored:
    ``user:token@`` in remote URLs is dropped, lines holding a secret value are removed. Pushing keeps
    working — each turn's environment gives git the token again. Returns the files changed."""
    changed: list[Path] = []
    candidates = [
        workspace / ".git" / "config",
        *(workspace / r.dir_name / ".git" / "config" for r in spec.repos),
    ]
    inside = workspace.resolve()
    for config in dict.fromkeys(candidates):
        # the agent owns the workspace: never follow a link it planted out of it (this may run as root)
        if config.is_symlink() or not config.resolve().is_relative_to(inside):
            continue
        try:
            text = config.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            continue
        clean = _URL_CREDENTIALS.sub(lambda m: m.group("scheme"), text)
        clean = "".join(line for line in clean.splitlines(keepends=True) if not any(f in line for f in forms))
        if clean != text:
            config.write_text(clean, encoding="utf-8")
            changed.append(config)
    return changed


def _clone(
    repo: GitRepo, target: Path, secrets: Mapping[str, str], branch: tuple[str, str | None] | None = None
) -> None:
    import git  # gitpython: imported only when a repo is cloned

    ref, create = repo.ref, None
    if branch is not None:
        name, base = branch
        if branch_exists(repo, name, secrets):
            ref = name
        elif base is not None:
            ref, create = base, name
        else:
            raise RunError(
                f"branch {name!r} does not exist on {repo.url}; create it from a base with "
                f"start_session(branch={name!r}, base_branch='main') (or push it first)"
            )
    try:
        kwargs: dict[str, object] = {"env": _git_env(secrets, repo)}
        if ref:
            kwargs["branch"] = ref
        if repo.depth:
            kwargs["depth"] = repo.depth
        cloned = git.Repo.clone_from(repo.url, target, **kwargs)  # type: ignore[arg-type]
        if create is not None:
            cloned.git.checkout("-q", "-b", create)
    except git.GitCommandError as exc:
        shutil.rmtree(target, ignore_errors=True)
        raise RunError(
            f"cannot clone {repo.url}: {redact(str(exc.stderr).strip(), secrets)}; check the URL, "
            f"the ref{' and the branch names' if branch else ''} and the {repo.auth or 'auth'} secret"
        ) from None


def _make_venv(venv: Path, packages: list[str], marker: Path) -> None:
    import subprocess

    with _file_lock(venv.with_suffix(".lock")):
        if marker.exists():
            return
        uv = shutil.which("uv") or str(Path(sys.executable).parent / "uv")
        env = {**os.environ, "UV_PYTHON_DOWNLOADS": "never"}
        steps = [
            [uv, "venv", "--quiet", "--python", sys.executable, str(venv)],
            [uv, "pip", "install", "--quiet", "--python", str(venv / "bin" / "python"), *packages],
        ]
        for argv in steps:
            done = subprocess.run(argv, capture_output=True, text=True, env=env, check=False)
            if done.returncode != 0:
                shutil.rmtree(venv, ignore_errors=True)
                raise BuildError(
                    f"installing packages {packages} failed: {done.stderr.strip()[-2000:]}; "
                    "check the names and versions in the spec's packages"
                )
        marker.write_text("\n".join(packages) + "\n")


async def _run_setup(
    script: str,
    paths: SessionPaths,
    env: Mapping[str, str],
    secrets: Mapping[str, str],
    user: AgentUser | None = None,
) -> None:
    proc = await asyncio.create_subprocess_exec(
        "bash",
        "-euo",
        "pipefail",
        "-c",
        script,
        cwd=paths.workspace,
        env=dict(env),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
        start_new_session=True,
        **(user.spawn_kwargs() if user is not None else {}),
    )
    out, _ = await proc.communicate()
    if proc.returncode != 0:
        tail = redact(out.decode(errors="replace")[-2000:], secrets)
        raise RunError(
            "the spec's setup_script failed; fix the script (it runs once per workspace)",
            exit_code=proc.returncode,
            stderr_tail=tail,
        )
