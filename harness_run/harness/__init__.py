"""Harness drivers, side by side: one module per harness CLI behind the ``HarnessDriver`` port."""

from harness_run.harness._base import HarnessDriver, LaunchPlan, LineParser, TurnContext
from harness_run.harness._files import (
    MCP_LAUNCHER_ENV,
    harness_files,
    mcp_proxy_env,
    mcp_secret_env,
    mcp_secret_values,
)
from harness_run.harness._guard import (
    GUARD_SOCKET_ENV,
    GUARD_TIMEOUT_S,
    GUARD_TOKEN_ENV,
    GUARD_URL_ENV,
    QUESTION_TOOLS,
    WRITE_TOOLS,
    approval_match,
    parse_call,
)
from harness_run.harness._guard import decide as guard_decide
from harness_run.harness._guard import verdict as guard_verdict
from harness_run.harness._policy import approval_rules, approval_wait, guard_rules
from harness_run.harness._sqlite import SQLITE_MAGIC, scrub_sqlite

__all__ = [
    "GUARD_SOCKET_ENV",
    "GUARD_TIMEOUT_S",
    "GUARD_TOKEN_ENV",
    "GUARD_URL_ENV",
    "MCP_LAUNCHER_ENV",
    "QUESTION_TOOLS",
    "SQLITE_MAGIC",
    "WRITE_TOOLS",
    "HarnessDriver",
    "LaunchPlan",
    "LineParser",
    "TurnContext",
    "approval_match",
    "approval_rules",
    "approval_wait",
    "get_driver",
    "guard_decide",
    "guard_rules",
    "guard_verdict",
    "harness_files",
    "mcp_proxy_env",
    "mcp_secret_env",
    "mcp_secret_values",
    "parse_call",
    "scrub_sqlite",
]


def get_driver(harness: str) -> HarnessDriver:
    """The driver for a harness name; raises UsageError for a harness harness-run has no driver for."""
    if harness == "claude-code":
        from harness_run.harness.claude_code import ClaudeCodeDriver

        return ClaudeCodeDriver()
    if harness == "codex":
        from harness_run.harness.codex import CodexDriver

        return CodexDriver()
    if harness == "opencode":
        from harness_run.harness.opencode import OpenCodeDriver

        return OpenCodeDriver()
    from harness_run.errors import UsageError

    raise UsageError(
        f"the {harness!r} harness has no local driver in this version of harness-run; "
        "use harness='claude-code', 'codex' or 'opencode'"
    )
