"""HarnessBox's workspace settings (``harnessbox.workspace``): where a session's files come from.

``WorkspaceConfig(workspace_mode=..., git_repo_config=GitRepoConfig(...), file_system_config=...)``
is turned into an :class:`~harness_run.AgentSpec` (the repo, its auth secret, ``git`` options) and
a per-session :class:`~harness_run.SessionConfig` (branch, workspace mode) by
:class:`~harness_run.harnessbox.HarnessBox`.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, SecretStr

__all__ = ["FileSystemConfig", "GitRepoConfig", "WorkspaceConfig", "WorkspaceMode"]


class WorkspaceMode(StrEnum):
    """``NEW``: each session its own workspace. ``SHARED``: the sessions of one HarnessBox share one."""

    NEW = "new"
    SHARED = "shared"


class _Config(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class GitRepoConfig(_Config):
    """The repository a session works in: cloned at ``branch`` (created from ``base_branch`` when the
    remote does not have it). ``auth_token`` goes to git only, per turn (never to disk or the agent's
    environment). The checkout is the session's workspace itself, where the agent and
    ``run_command`` start; ``clone_dir_name`` is accepted for compatibility and names nothing here
    (the workspace folder is the session's own)."""

    remote: str = Field(min_length=1)
    branch: str = "main"
    base_branch: str | None = None
    clone_depth: int | None = Field(default=None, gt=0)
    auth_token: SecretStr | None = None
    clone_dir_name: str | None = None

    def __init__(
        self,
        remote: str,
        *,
        branch: str = "main",
        base_branch: str | None = None,
        clone_depth: int | None = None,
        auth_token: str | None = None,
        clone_dir_name: str | None = None,
    ) -> None:
        fields: dict[str, Any] = {
            "remote": remote,
            "branch": branch,
            "base_branch": base_branch,
            "clone_depth": clone_depth,
            "auth_token": auth_token,
            "clone_dir_name": clone_dir_name,
        }
        super().__init__(**fields)


class FileSystemConfig(_Config):
    """A host directory used as the workspace (local provider: in place; docker: bind-mounted)."""

    host_dir: str = Field(min_length=1)


class WorkspaceConfig(_Config):
    """Workspace settings of a :class:`~harness_run.harnessbox.HarnessBox`.

    ``commit_on_exit`` (default True): a session with a repo commits its work and pushes it to its
    branch when it is killed (``session.kill()``, ``hb.kill()``, leaving ``async with``);
    ``author`` is ``"Name <email>"`` of those commits."""

    workspace_mode: WorkspaceMode = WorkspaceMode.NEW
    git_repo_config: GitRepoConfig | None = None
    file_system_config: FileSystemConfig | None = None
    commit_on_exit: bool = True
    author: str = "HarnessBox <harnessbox@localhost>"
