"""The client of ``harness-run serve`` (the team server): :func:`connect` -> :class:`ServerEngine`,
the reader of a server's sessions (:class:`ServerHistory`; ``ServerStore`` is its deprecated name)
and the server's wire models, which the server (``harness_run.server``) imports from here. (The
client of the in-image worker is :mod:`harness_run.runtime.worker_client`.)

``HttpEngine`` is :class:`ServerEngine`'s deprecated name (it warns; removed in the release after
0.1.0). aiohttp is imported when an event stream is opened, not by importing this package.
"""

import warnings
from typing import Any

from harness_run.runtime.server_client._engine import ServerEngine, connect
from harness_run.runtime.server_client._history import ServerHistory, ServerStore
from harness_run.runtime.server_client._protocol import (
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
    SessionList,
    Steered,
    SteerRequest,
    TurnList,
    TurnRequest,
    TurnStarted,
    WorkspaceRequest,
    event_id,
    parse_event_id,
)
from harness_run.runtime.server_client._wire import Wire

__all__ = [
    "ApprovalList",
    "CreateSession",
    "Decision",
    "EngineList",
    "ErrorBody",
    "ExecOutput",
    "ExecRequest",
    "Health",
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


def __getattr__(name: str) -> Any:
    if name == "HttpEngine":
        warnings.warn(
            "harness_run.runtime.server_client.HttpEngine is deprecated: use ServerEngine (the same "
            "class; harness_run.connect() returns it)",
            DeprecationWarning,
            stacklevel=2,
        )
        return ServerEngine
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
