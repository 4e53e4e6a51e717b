"""Engines served by ``harness-run serve``: the thin client (:func:`connect` -> :class:`HttpEngine`),
the reader of a server's sessions (:class:`ServerHistory`; ``ServerStore`` is its deprecated name)
and the server's wire models, which the server (``harness_run.server``) imports from here.

aiohttp is imported when an event stream is opened, not by importing this package.
"""

from harness_run.runtime.http._engine import HttpEngine, connect
from harness_run.runtime.http._history import ServerHistory, ServerStore
from harness_run.runtime.http._protocol import (
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
from harness_run.runtime.http._wire import Wire

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
