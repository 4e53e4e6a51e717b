"""harness-run: run coding agents (Claude Code, Codex, OpenCode) locally and on Agent Sandbox.

The runtimes are submodules (``from harness_run import local``); they import their heavier
dependencies only when used. The spec types (``AgentSpec`` …), ``Engine``, ``Session``, ``Run`` and
``RunResult`` are imported on first use, so ``import harness_run`` (and with it the ``harness-run``
command's start) loads no pydantic: a fresh ``harness-run run`` can spawn the harness first.
"""

from typing import TYPE_CHECKING, Any

from harness_run.errors import (
    HarnessRunError,
    InfrastructureError,
    RunError,
    SpecError,
    UsageError,
)
from harness_run.vocab.version import __version__

if TYPE_CHECKING:
    from harness_run.events import RunResult
    from harness_run.runtime import Engine, Run, Session
    from harness_run.runtime.server_client import connect
    from harness_run.spec import (
        AgentSpec,
        ApprovalPolicy,
        GitOptions,
        McpServer,
        Network,
        RepoSource,
        Resources,
        Secret,
        SecurityPolicy,
        SessionConfig,
        SkillSource,
        SystemPrompt,
        TurnConfig,
        WorkspaceOptions,
    )

# the definition
__all__ = [
    "AgentSpec",
    "ApprovalPolicy",
    "GitOptions",
    "McpServer",
    "Network",
    "RepoSource",
    "Resources",
    "Secret",
    "SecurityPolicy",
    "SkillSource",
    "SystemPrompt",
]
# its overlays, per session and per turn
__all__ += ["SessionConfig", "TurnConfig", "WorkspaceOptions"]
# Engine -> Session -> Run (imported on first use)
__all__ += ["Engine", "Run", "RunResult", "Session"]
# a team server's engines (harness-run serve)
__all__ += ["connect"]
# errors
__all__ += ["HarnessRunError", "InfrastructureError", "RunError", "SpecError", "UsageError"]
__all__ += ["__version__"]

_LAZY = {
    **dict.fromkeys(
        [
            "AgentSpec",
            "ApprovalPolicy",
            "GitOptions",
            "McpServer",
            "Network",
            "RepoSource",
            "Resources",
            "Secret",
            "SecurityPolicy",
            "SessionConfig",
            "SkillSource",
            "SystemPrompt",
            "TurnConfig",
            "WorkspaceOptions",
        ],
        "harness_run.spec",
    ),
    "Engine": "harness_run.runtime",
    "Run": "harness_run.runtime",
    "Session": "harness_run.runtime",
    "RunResult": "harness_run.events",
    "connect": "harness_run.runtime.server_client",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        value = getattr(importlib.import_module(_LAZY[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'harness_run' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(__all__)
