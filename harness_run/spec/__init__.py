"""The declarative input: ``AgentSpec``, its value types, and the session/turn overlays."""

from harness_run.spec._agent import (
    HARNESSES,
    AgentSpec,
    Harness,
    OutputSchema,
    PermissionMode,
    ReasoningEffort,
    json_schema_of,
)
from harness_run.spec._approvals import ApprovalPolicy
from harness_run.spec._checks import check_prompt, is_reserved_env_name, looks_like_credential
from harness_run.spec._config import DEPLOY_ONLY_FIELDS, SessionConfig, TurnConfig, effective_spec
from harness_run.spec._git import CommitMoment, GitOptions
from harness_run.spec._security import SecurityPolicy
from harness_run.spec._values import (
    GitRepo,
    GitSkill,
    LocalSkill,
    McpServer,
    Network,
    RemoteMcpServer,
    RepoSource,
    Resources,
    Secret,
    SkillSource,
    StdioMcpServer,
    SystemPrompt,
)
from harness_run.spec._workspace import WorkspaceMode, WorkspaceOptions

__all__ = [
    "DEPLOY_ONLY_FIELDS",
    "HARNESSES",
    "AgentSpec",
    "ApprovalPolicy",
    "CommitMoment",
    "GitOptions",
    "GitRepo",
    "GitSkill",
    "Harness",
    "LocalSkill",
    "McpServer",
    "Network",
    "OutputSchema",
    "PermissionMode",
    "ReasoningEffort",
    "RemoteMcpServer",
    "RepoSource",
    "Resources",
    "Secret",
    "SecurityPolicy",
    "SessionConfig",
    "SkillSource",
    "StdioMcpServer",
    "SystemPrompt",
    "TurnConfig",
    "WorkspaceMode",
    "WorkspaceOptions",
    "check_prompt",
    "effective_spec",
    "is_reserved_env_name",
    "json_schema_of",
    "looks_like_credential",
]
