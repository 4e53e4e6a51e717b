"""Records kept by history stores. Never a secret value: configs are stored as given (names only).

Records are frozen: change one with ``record.model_copy(update={...})`` and write the copy back
(``put_session``, or ``update_session`` for a read-modify-write). Closed vocabularies are ``Literal``
types, so a record that says something else is refused when it is made — or, when it comes from
the store, reported as corrupt (``StoreError``). Unknown keys in stored JSON are ignored, so a store
written by a newer version stays readable.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any, Literal, Self

from pydantic import BaseModel, ConfigDict, Field

from harness_run.events import RunResult, StopReason

__all__ = [
    "ApiKeyRecord",
    "EngineRecord",
    "EngineRuntime",
    "KeyScope",
    "SessionRecord",
    "SessionStatus",
    "SnapshotRef",
    "TurnLease",
    "TurnRecord",
]

EngineRuntime = Literal[
    "local",  # local.deploy(): host processes
    "container",  # local containers of the compiled image
    "sandbox",  # sandbox.deploy(): Agent Sandbox on Kubernetes
    "e2b",  # harness_run.runtime.e2b: E2B sandboxes of a template
    "daytona",  # harness_run.runtime.daytona: Daytona sandboxes of a snapshot
]
SessionStatus = Literal[
    "idle",  # no turn running; the last one (if any) ended without an error
    "running",  # a turn is running (in some process or sandbox)
    "failed",  # the last turn ended with an error; the session can go on
]


class _Record(BaseModel):
    model_config = ConfigDict(frozen=True, extra="ignore", defer_build=True)

    def model_copy(self, *, update: Mapping[str, Any] | None = None, deep: bool = False) -> Self:
        """A copy with ``update`` applied. Unlike pydantic's own ``model_copy`` the result is
        validated, so an update cannot put a value into a record that its type refuses (e.g. a
        status outside :data:`SessionStatus`), and an unknown field name is an error."""
        if not update:
            return super().model_copy(deep=deep)
        unknown = sorted(set(update) - set(type(self).model_fields))
        if unknown:
            raise ValueError(f"{type(self).__name__} has no field {', '.join(unknown)}")
        fields = {name: getattr(self, name) for name in type(self).model_fields}
        fields.update(update)
        return self.model_validate(copy.deepcopy(fields) if deep else fields)


class EngineRecord(_Record):
    name: str
    version: str
    spec: dict[str, Any]
    runtime: EngineRuntime = "local"
    created_at: float = 0.0


class SnapshotRef(_Record):
    """Blobs saved after a turn: the workspace tarball and the harness's native session files."""

    workspace: str | None = None
    native: str | None = None
    turn: int = 0


class SessionRecord(_Record):
    session_id: str
    engine: str
    version: str
    harness: str
    created_at: float
    updated_at: float
    status: SessionStatus = "idle"
    turns: int = 0
    config: dict[str, Any] = Field(default_factory=dict[str, Any])
    native_session_id: str | None = None
    native_started: bool = False
    workspace_ready: bool = False
    last_result: RunResult | None = None
    snapshot: SnapshotRef | None = None
    stop_reason: StopReason | None = None
    commit_sha: str | None = None
    """The last commit of the session's work (``git`` options), after a turn or on close."""
    pushed_ref: str | None = None
    """The remote ref that commit was pushed to."""
    owner: str | None = None
    """The id of the team-server API key that made the session (None: made by the library)."""

    @property
    def branch(self) -> str | None:
        """The branch the session works on (``SessionConfig.branch``), if it names one."""
        value = self.config.get("branch")
        return value if isinstance(value, str) else None


class TurnRecord(_Record):
    session_id: str
    turn: int
    prompt: str
    started_at: float
    settings: dict[str, Any] = Field(default_factory=dict[str, Any])
    """The effective settings of the turn (model, prompt, tools, budgets, schema): no secrets."""
    turn_config: dict[str, Any] = Field(default_factory=dict[str, Any])
    secret_names: list[str] = Field(default_factory=list[str])
    result: RunResult | None = None
    steers: list[str] = Field(default_factory=list[str])
    snapshot: SnapshotRef | None = None
    """The checkpoint this turn saved (so deleting the session finds every blob it left)."""


class TurnLease(_Record):
    """Who holds a turn's reservation, and when they last said they are alive (``renew_turn``).

    A lease not renewed for longer than the owner's renewal promise means its owner is gone."""

    session_id: str
    turn: int
    holder: str
    renewed_at: float


KeyScope = Literal[
    "read",  # list and read its own sessions, their events and history
    "turn",  # read + start sessions and turns, steer and interrupt them (the default)
    "exec",  # turn + run commands in its sessions' workspaces
    "admin",  # everything, on every key's sessions; key and spend overviews
]


class ApiKeyRecord(_Record):
    """A server API key (``harness-run serve keys``): only its sha256 is kept, never the key.

    ``mac`` authenticates the record under the server's secret (not in the store): a record that
    ``keys create`` did not make is never accepted."""

    key_id: str
    name: str
    sha256: str
    created_at: float
    revoked_at: float | None = None
    scopes: tuple[KeyScope, ...] = ("turn",)
    budget_usd: float | None = None
    """Spend allowed per ``budget_per`` period (None: no key budget)."""
    budget_per: Literal["day", "month"] | None = None
    mac: str = ""
