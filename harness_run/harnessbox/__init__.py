"""HarnessBox's API over harness-run: switch with one import.

``from harness_run.harnessbox import HarnessBox, WorkspaceConfig, GitRepoConfig`` and the code
written for HarnessBox runs on harness-run's engines (``provider="local" | "docker" |
"agent-sandbox"``): one engine per ``HarnessBox``, one harness-run session per HarnessBox session,
work committed and pushed to the session's branch when it is killed. See docs/harnessbox.md.
"""

from harness_run.harnessbox._box import GIT_TOKEN, HarnessBox, HarnessBoxSecrets
from harness_run.harnessbox._session import HarnessBoxSession, MessageStream, StreamEvent
from harness_run.harnessbox.providers import (
    PROVIDERS,
    AgentSandboxProvider,
    DockerProvider,
    LocalProvider,
    Provider,
    provider_for,
)
from harness_run.harnessbox.workspace import FileSystemConfig, GitRepoConfig, WorkspaceConfig, WorkspaceMode
from harness_run.spec import SecurityPolicy

__all__ = [
    "GIT_TOKEN",
    "PROVIDERS",
    "AgentSandboxProvider",
    "DockerProvider",
    "FileSystemConfig",
    "GitRepoConfig",
    "HarnessBox",
    "HarnessBoxSecrets",
    "HarnessBoxSession",
    "LocalProvider",
    "MessageStream",
    "Provider",
    "SecurityPolicy",
    "StreamEvent",
    "WorkspaceConfig",
    "WorkspaceMode",
    "provider_for",
]
