"""Daytona: each session in its own Daytona sandbox of the engine's snapshot, driven through the
in-image worker like the other remote runtimes (``pip install "harness-run[daytona]"``;
HarnessBox's ``provider="daytona"``). The SDK is imported when an engine is deployed."""

from harness_run.runtime.daytona._deploy import RUNTIME, DaytonaEngine, deploy_daytona, snapshot_name
from harness_run.runtime.daytona._provider import DaytonaProvider
from harness_run.runtime.daytona._sandboxes import PREVIEW_TOKEN_HEADER, STORE_MOUNT, DaytonaSandboxes

__all__ = [
    "PREVIEW_TOKEN_HEADER",
    "RUNTIME",
    "STORE_MOUNT",
    "DaytonaEngine",
    "DaytonaProvider",
    "DaytonaSandboxes",
    "deploy_daytona",
    "snapshot_name",
]
