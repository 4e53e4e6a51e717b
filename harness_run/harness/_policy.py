"""``SecurityPolicy`` compiled into each harness's own mechanism (pure functions of the policy).

- ``denied_tools``: Claude Code ``permissions.deny`` + the guard hook; Codex the guard hook
  (``[[hooks.PreToolUse]]``); OpenCode ``permission.<tool> = "deny"``.
- ``denied_bash_patterns``: Claude Code ``Bash(<pattern>)`` deny rules + the hook; Codex the hook;
  OpenCode ``permission.bash`` patterns.
- ``deny_network``: Codex ``sandbox_mode = "workspace-write"`` with the network off (its Linux
  sandbox), web search off, + the hook; refused on Claude Code and OpenCode (no OS sandbox here).
- credential guards: Claude Code deny rules (web tools, sub-agents, ``.env`` …) + the hook; Codex the
  hook + ``web_search = "disabled"``; OpenCode ``permission`` patterns.

The guard hook (:mod:`harness_run.harness._guard`) fails closed. OpenCode has no pre-tool hook that
``opencode run --pure`` loads, so there the guards are OpenCode's own permission patterns, evaluated
inside the CLI (they cannot crash or time out, but they are glob patterns over each command).
"""

from __future__ import annotations

import shlex
import sys
from collections.abc import Mapping
from typing import Any, Final

from harness_run.errors import SpecError, SpecIssue
from harness_run.harness._guard import GUARD_TIMEOUT_S, encode_rules
from harness_run.spec import AgentSpec, ApprovalPolicy, SecurityPolicy

__all__ = [
    "HOOK_TIMEOUT_S",
    "approval_rules",
    "approval_wait",
    "claude_deny_rules",
    "guard_command",
    "guard_rules",
    "opencode_guarded_shell",
    "opencode_permission",
    "refuse_policy",
]

HOOK_TIMEOUT_S: Final = 30
"""The CLI's own timeout for the hook: longer than the guard's, so the guard's ``timeout`` fires first
(and denies); Claude Code and Codex would treat their own hook timeout as "no decision"."""

# Tool names only: the hook (fail closed) judges every call's paths (`.env`, `.aws/`, `.config/gcloud`,
# `.claude/settings`) itself. Path rules such as `Read(**/.env)` cost Claude Code ~17 ms at every start
# (measured: `benchmarks/results/turn_cost.json`, 2026-12-03 night) for a check the hook already makes.
_CLAUDE_GUARD_DENY: Final = ("WebFetch", "WebSearch", "Task", "Agent")
# OpenCode permission patterns (glob, `*` = anything) for the credential guards
_OPENCODE_BASH_DENY: Final = (
    "env",
    "env -*",
    "printenv",
    "printenv *",
    "set",
    "export",
    "export -p",
    "declare -*",
    "compgen -e*",
    "compgen -v*",
    "ps e*",
    "*environ*",
    "*getenv*",
    "*process.env*",
    "*/proc/*/mem*",
    "*.env",
    "*.env *",
    "*.env.*",
    "*.env'*",
    '*.env"*',
    "*.aws/*",
    "*.config/gcloud*",
    "*application_default_credentials*",
    "*.netrc*",
    "*.git-credentials*",
    "*169.254.169.254*",
    "*169.254.170.2*",
    "*metadata.google.internal*",
    "*git config*credential*",
    "*git credential*",
    "*git config*--get-regexp*",
    "*git config*--list*",
    "*git config -l*",
    "*extraheader*",
    "*GIT_CONFIG_*",
    "*HARNESS_RUN_MCP_*",
    "*HARNESS_RUN_PROXY_TOKEN*",
    "*_API_KEY*",
    "*AUTH_TOKEN*",
    "*OAUTH_TOKEN*",
    "*GOOGLE_APPLICATION_CREDENTIALS*",
    "*AWS_SECRET_ACCESS_KEY*",
    "*harness-run/opencode.json*",
    "*harness-run/shell*",
)
_OPENCODE_PATH_DENY: Final = (
    "*.env",
    "*.env.*",
    "*/.aws/*",
    "*/.config/gcloud/*",
    "*/proc/*",
    "*/.netrc",
    "*/.git-credentials",
    "*harness-run/opencode.json",
    "*harness-run/shell/*",
)
_OPENCODE_GUARD_TOOLS: Final = ("webfetch", "websearch", "codesearch", "task")


def guard_rules(policy: SecurityPolicy) -> dict[str, Any]:
    """The guard script's rules (names and patterns only; never a secret)."""
    return {
        "denied_tools": list(policy.denied_tools),
        "denied_bash_patterns": list(policy.denied_bash_patterns),
        "deny_network": policy.deny_network,
        "credential_guards": policy.include_credential_guards,
    }


def approval_rules(approvals: ApprovalPolicy | None) -> dict[str, Any] | None:
    """The guard's ``approvals`` rules (patterns and names only), None when nothing waits."""
    if approvals is None or not approvals.asks_anything:
        return None
    return {
        "commands": list(approvals.commands),
        "tools": list(approvals.tools),
        "file_writes": approvals.file_writes,
    }


def approval_wait(spec: AgentSpec) -> float:
    """Seconds a tool call may wait for a person (0 without approvals): every hook timeout of the
    turn is raised by this much, so the guard, not the CLI, decides what a long wait means."""
    approvals = spec.approvals
    return approvals.timeout_s if approvals is not None and approvals.asks_anything else 0.0


def guard_command(
    policy: SecurityPolicy,
    python: str | None = None,
    *,
    shell: bool = False,
    env: Mapping[str, str] | None = None,
    approvals: ApprovalPolicy | None = None,
) -> str | None:
    """The hook's shell command, or None when the policy enforces nothing. Any exit but 0 of the
    guard (a crash, a missing interpreter, ``timeout``'s 124) becomes 2: deny. ``shell``: the
    command text on stdin instead of the hook's JSON (:func:`opencode_guarded_shell`).

    When the turn's ``env`` names the engine's guard server (``GUARD_SOCKET_ENV``, set by
    :class:`~harness_run.security.GuardBroker`), the hook runs the small client that asks it (a
    Python start, ~15 ms, instead of ~35 ms for the script that imports and compiles its rules);
    without one (a launch plan outside an engine), the self-contained script with the rules in the
    command. Both behind the same fail-closed wrapper.

    With ``approvals`` the hook is there even when the policy enforces nothing, and may wait
    ``approvals.timeout_s`` longer (the server answers by then: a timeout is a deny); the
    self-contained script, which has no one to ask, denies the calls that would wait."""
    asks = approval_rules(approvals)
    if not policy.enforces_anything and asks is None:
        return None
    from harness_run.harness import _guard

    interpreter = python or sys.executable
    wait = approvals.timeout_s if asks is not None and approvals is not None else 0.0
    timeout = f"{GUARD_TIMEOUT_S + wait:g}"
    socket, token = (env or {}).get(_guard.GUARD_SOCKET_ENV), (env or {}).get(_guard.GUARD_TOKEN_ENV)
    if socket and token:
        inner = [interpreter, "-I", "-S", str(_guard.GUARD_CLIENT), socket, token]
    else:
        rules = guard_rules(policy) | ({"approvals": asks} if asks else {})
        inner = [interpreter, "-I", "-S", str(_guard.GUARD_SCRIPT), encode_rules(rules)]
    inner += ["--shell"] if shell else []
    failed = "harness-run denied this tool call: the guard failed (exit $s), so nothing runs"
    return (
        f"timeout -k 1 {timeout} {shlex.join(inner)} || "
        f'{{ s=$?; [ "$s" -eq 2 ] || echo "{failed}" >&2; exit 2; }}'
    )


def opencode_guarded_shell(
    policy: SecurityPolicy,
    real_shell: str,
    env: Mapping[str, str] | None = None,
    approvals: ApprovalPolicy | None = None,
) -> str | None:
    """OpenCode's ``shell`` (the config key its bash tool runs every command with, as
    ``<shell> -c <command>``): a script named ``bash`` that runs the guard on the whole command text
    first and ``exec``s ``real_shell`` only when it allows it — a loop over ``/proc/*/environ``
    included, which OpenCode's per-command permission patterns never see. None without a policy."""
    check = guard_command(policy, shell=True, env=env, approvals=approvals)
    if check is None:
        return None
    return (
        "#!/bin/sh\n"
        "# generated by harness-run — do not edit: the guard sees every command OpenCode's bash tool runs\n"
        f'if [ "$1" = "-c" ]; then printf %s "$2" | {check}; fi\n'
        f'exec {shlex.quote(real_shell)} "$@"\n'
    )


def claude_deny_rules(policy: SecurityPolicy) -> list[str]:
    """Claude Code ``permissions.deny`` entries for the policy (the hook checks all of it again)."""
    rules = list(policy.denied_tools)
    rules += [f"Bash({pattern})" for pattern in policy.denied_bash_patterns]
    if policy.include_credential_guards:
        rules += _CLAUDE_GUARD_DENY
    elif policy.deny_network:
        rules += ["WebFetch", "WebSearch"]
    return list(dict.fromkeys(rules))


def opencode_permission(policy: SecurityPolicy, base: Mapping[str, Any]) -> dict[str, Any]:
    """OpenCode ``permission`` entries for the policy, merged over ``base`` (the permission mode's
    and the allowed tools'): a pattern map keeps the base's action for ``*`` and denies the rest."""

    def default(tool: str) -> str:
        value = base.get(tool, "allow")
        return value if isinstance(value, str) else "allow"

    out: dict[str, Any] = {}
    bash = [*policy.denied_bash_patterns]
    if policy.include_credential_guards:
        bash += _OPENCODE_BASH_DENY
        for tool in ("read", "edit", "grep", "glob", "list"):
            out[tool] = {"*": default(tool), **dict.fromkeys(_OPENCODE_PATH_DENY, "deny")}
        out.update(dict.fromkeys(_OPENCODE_GUARD_TOOLS, "deny"))
    if bash:
        out["bash"] = {"*": default("bash"), **dict.fromkeys(bash, "deny")}
    out.update(dict.fromkeys((_opencode_name(t) for t in policy.denied_tools), "deny"))
    return out


def _opencode_name(tool: str) -> str:
    if tool.startswith("mcp__"):
        return tool.removeprefix("mcp__").replace("__", "_", 1)
    return tool.lower()


_NO_NETWORK: Final = {
    "claude-code": "Claude Code can cut its tools' network only inside its bubblewrap sandbox, which "
    "harness-run does not run",
    "opencode": "OpenCode has no sandbox that cuts its tools' network",
}


def refuse_policy(policy: SecurityPolicy, harness: str) -> None:
    """Raise :class:`SpecError` naming each policy setting ``harness`` cannot enforce."""
    issues: list[SpecIssue] = []
    if policy.deny_network and harness in _NO_NETWORK:
        issues.append(
            SpecIssue(
                "security_policy.deny_network",
                f"the {harness} harness cannot enforce it: {_NO_NETWORK[harness]}",
                "use harness='codex' (its sandbox turns the network off), or drop deny_network and "
                "deny the web tools with denied_tools",
            )
        )
    if harness == "opencode":
        odd = [
            t
            for t in policy.denied_tools
            if not _opencode_name(t).replace("-", "_").replace("_", "").isalnum()
        ]
        if odd:
            issues.append(
                SpecIssue(
                    "security_policy.denied_tools",
                    f"OpenCode can only deny tools by plain name, not {odd}",
                    "give tool names without patterns (e.g. 'webfetch', 'mcp__server__tool')",
                )
            )
    if issues:
        raise SpecError(issues, source=f"security_policy for {harness}")
