"""Deprecated: :mod:`harness_run.runtime.worker_client`'s name before 0.1.0 (the client of the
in-image worker). Importing it warns (``DeprecationWarning``); it goes in the release after 0.1.0."""

import warnings

from harness_run.runtime.worker_client import (
    Claim,
    DeliverRequest,
    DeliverResponse,
    ErrorBody,
    ExecRequest,
    ExecResponse,
    Health,
    HeldClaims,
    InterruptResponse,
    SandboxProvider,
    SteerRequest,
    SteerResponse,
    TurnInfo,
    TurnRequest,
    TurnStatus,
    WorkerClient,
    WorkerEngine,
)

__all__ = [
    "Claim",
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

warnings.warn(
    "harness_run.runtime.remote is deprecated: import from harness_run.runtime.worker_client (the same "
    "names), or harness_run.providers for the SandboxProvider port",
    DeprecationWarning,
    stacklevel=2,
)
