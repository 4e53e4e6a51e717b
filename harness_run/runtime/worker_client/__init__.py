"""Engines whose turns run on the in-image worker (``python -m harness_run.worker``), wherever the
sandbox comes from: the client half of the worker protocol (:class:`WorkerClient` and the request and
response models), the :class:`SandboxProvider` port with its shared :class:`HeldClaims` bookkeeping,
and :class:`WorkerEngine`, the one Engine over any provider (Docker containers, Agent Sandbox claims).
(The client of ``harness-run serve`` is :mod:`harness_run.runtime.server_client`.)

aiohttp is imported when a client is used, not by importing this package.
"""

from harness_run.runtime.worker_client._client import WorkerClient
from harness_run.runtime.worker_client._engine import WorkerEngine
from harness_run.runtime.worker_client._protocol import (
    DeliverRequest,
    DeliverResponse,
    ErrorBody,
    ExecRequest,
    ExecResponse,
    Health,
    InterruptResponse,
    SteerRequest,
    SteerResponse,
    TurnInfo,
    TurnRequest,
    TurnStatus,
)
from harness_run.runtime.worker_client._provider import Claim, HeldClaims, SandboxProvider

__all__ = [
    # the engine over a provider
    "Claim",
    # the worker protocol
    "DeliverRequest",
    "DeliverResponse",
    "ErrorBody",
    "ExecRequest",
    "ExecResponse",
    "Health",
    "HeldClaims",
    "InterruptResponse",
    "SandboxProvider",
    "SteerRequest",
    "SteerResponse",
    "TurnInfo",
    "TurnRequest",
    "TurnStatus",
    "WorkerClient",
    "WorkerEngine",
]
