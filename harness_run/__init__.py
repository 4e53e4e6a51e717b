"""harness-run: run coding agents (Claude Code, Codex, OpenCode) locally and on Agent Sandbox.

The runtimes are submodules (``from harness_run import local``); they import their heavier
dependencies only when used.
"""

from harness_run._version import __version__
from harness_run.errors import (
    HarnessRunError,
    InfrastructureError,
    RunError,
    SpecError,
    UsageError,
)
from harness_run.spec import (
    AgentSpec,
    McpServer,
    Network,
    RepoSource,
    Resources,
    Secret,
    SessionConfig,
    SkillSource,
    SystemPrompt,
    TurnConfig,
)

__all__ = [
    "AgentSpec",
    "HarnessRunError",
    "InfrastructureError",
    "McpServer",
    "Network",
    "RepoSource",
    "Resources",
    "RunError",
    "Secret",
    "SessionConfig",
    "SkillSource",
    "SpecError",
    "SystemPrompt",
    "TurnConfig",
    "UsageError",
    "__version__",
]
