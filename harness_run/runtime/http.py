"""Deprecated: :mod:`harness_run.runtime.server_client`'s name before 0.1.0 (the client of
``harness-run serve``; ``HttpEngine`` is now ``ServerEngine``). Importing it warns
(``DeprecationWarning``); it goes in the release after 0.1.0."""

import warnings

from harness_run.runtime.server_client import (
    ApprovalList,
    CreateSession,
    Decision,
    EngineList,
    ErrorBody,
    ExecOutput,
    ExecRequest,
    Health,
    Interrupted,
    KeyInfo,
    ServerEngine,
    ServerHistory,
    ServerStore,
    SessionList,
    Steered,
    SteerRequest,
    TurnList,
    TurnRequest,
    TurnStarted,
    Wire,
    WorkspaceRequest,
    connect,
    event_id,
    parse_event_id,
)
from harness_run.runtime.server_client import ServerEngine as HttpEngine

__all__ = [
    "ApprovalList",
    "CreateSession",
    "Decision",
    "EngineList",
    "ErrorBody",
    "ExecOutput",
    "ExecRequest",
    "Health",
    "HttpEngine",
    "Interrupted",
    "KeyInfo",
    "ServerEngine",
    "ServerHistory",
    "ServerStore",
    "SessionList",
    "SteerRequest",
    "Steered",
    "TurnList",
    "TurnRequest",
    "TurnStarted",
    "Wire",
    "WorkspaceRequest",
    "connect",
    "event_id",
    "parse_event_id",
]

warnings.warn(
    "harness_run.runtime.http is deprecated: import from harness_run.runtime.server_client (the same "
    "names; HttpEngine is now ServerEngine), or use harness_run.connect",
    DeprecationWarning,
    stacklevel=2,
)
