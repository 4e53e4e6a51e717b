"""Records kept by history stores. Never a secret value: configs are stored as given (names only)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from harness_run.events import RunResult

__all__ = ["EngineRecord", "SessionRecord", "SnapshotRef", "TurnRecord"]


class _Record(BaseModel):
    model_config = ConfigDict(extra="ignore", defer_build=True)


class EngineRecord(_Record):
    name: str
    version: str
    spec: dict[str, Any]
    runtime: str = "local"
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
    status: str = "idle"
    turns: int = 0
    config: dict[str, Any] = Field(default_factory=dict[str, Any])
    native_session_id: str | None = None
    native_started: bool = False
    workspace_ready: bool = False
    last_result: RunResult | None = None
    snapshot: SnapshotRef | None = None
    stop_reason: str | None = None


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
