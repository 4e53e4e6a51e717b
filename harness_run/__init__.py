"""harness-run: run coding agents (Claude Code, Codex, OpenCode) locally and on Agent Sandbox.

The runtimes are submodules (``from harness_run import local``); they import their heavier
dependencies only when used.
"""

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
from harness_run.vocab.version import __version__

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
