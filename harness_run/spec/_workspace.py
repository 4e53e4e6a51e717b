"""``WorkspaceOptions``: where a session works — its own workspace, one shared by the engine's
sessions, or a directory of the host used in place (HarnessBox's ``WorkspaceMode`` and
``FileSystemConfig``)."""

from __future__ import annotations

from typing import Literal

from pydantic import field_validator

from harness_run.spec._base import SpecModel, spec_fail
from harness_run.spec._types import Text

__all__ = ["WorkspaceMode", "WorkspaceOptions"]

WorkspaceMode = Literal["new", "shared"]


class WorkspaceOptions(SpecModel):
    """A session's workspace (``SessionConfig(workspace=...)``; kept in the session's record).

    ``mode="new"`` (default): the session has a workspace of its own; a new session on a
    (remote, branch) whose workspace is idle takes that one over instead of cloning (see
    docs/workspaces.md, "Pooling"). ``mode="shared"``: every session of the engine (on the same
    branch) works in one workspace; their turns take turns — a turn that finds another session's
    turn in it waits for it to end (a ``setup`` event says so).

    ``host_dir``: a directory of this machine used as the workspace itself — in place on the local
    runtime (never deleted by cleanup), bind-mounted on the container runtime, refused by the
    sandbox runtime. It must exist and may not be ``/``, the home directory itself or a folder
    holding harness-run's workdir; ``~`` is expanded and the path resolved when the session starts.
    Sessions naming the same directory share it (turns take turns, as in ``shared`` mode).
    """

    mode: WorkspaceMode = "new"
    host_dir: Text | None = None

    @field_validator("host_dir")
    @classmethod
    def _host_dir(cls, value: str | None) -> str | None:
        if value is not None and not value.strip():
            example = "'~/src/webapp'"  # fresh-machine ok: an example in the message, nothing opens it
            raise spec_fail("is blank", f"give the directory to work in, e.g. {example}, or leave it out")
        return value
