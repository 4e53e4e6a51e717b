# pyright: reportUnknownArgumentType=false
# (the hook reads untyped JSON and imports no typing helpers at run time: see _any)
"""The pre-tool-use guard: the verdict on each tool call, stdlib only, that every harness asks for.

Claude Code (``PreToolUse`` hook in ``--settings``) and Codex (``[[hooks.PreToolUse]]`` in its
``config.toml``) run :func:`guard_command`'s shell command with the tool call as JSON on stdin
(``tool_name``, ``tool_input``). The command exits 0 to let the call run and 2 (reason on stderr,
which the CLI shows the model) to refuse it. It **fails closed**: it is ``timeout … python -I -S …
|| exit 2``, so a guard that crashes, cannot start or does not answer within :data:`GUARD_TIMEOUT_S`
seconds exits 2 as well, which both CLIs treat as "deny".

In an engine's turn the verdict (:func:`decide`) runs in the engine's process
(``harness_run.security.GuardBroker``) and the hook runs ``_guard_client.py``, which only asks it
(~15 ms per tool call instead of ~35 ms: no imports, no regex compiles per call). Without a guard
server this file is the hook itself: ``python -I -S _guard.py RULES``, the rules base64-encoded in the
command (no file the agent could edit). Both ways the same :func:`verdict` decides; the tests import
it too. The checks are patterns over the tool call: they stop the known ways to read credentials
(HarnessBox's threat table) and the user's denied tools and commands, but a determined agent can
obfuscate a command past any pattern list — the credentials themselves are kept out of the agent's
reach elsewhere (see docs/secrets-and-security.md).
"""

from __future__ import annotations

import binascii
import fnmatch
import json
import os.path
import re
import shlex
import sys

TYPE_CHECKING = False  # not `typing.TYPE_CHECKING`: importing typing costs the hook ~4 ms per call
if TYPE_CHECKING:  # the hook runs with `python -I -S`: nothing imported that it does not need
    from collections.abc import Iterator, Mapping
    from pathlib import Path
    from typing import Any, Final

__all__ = [
    "GUARD_CLIENT",
    "GUARD_SCRIPT",
    "GUARD_SOCKET_ENV",
    "GUARD_TIMEOUT_S",
    "GUARD_TOKEN_ENV",
    "GUARD_URL_ENV",
    "QUESTION_TOOLS",
    "WRITE_TOOLS",
    "approval_match",
    "decide",
    "decode_rules",
    "encode_rules",
    "main",
    "parse_call",
    "verdict",
]

GUARD_SCRIPT: str | Path = __file__
"""The script the hook command runs (tests point it at a broken one to check that it fails closed)."""
GUARD_CLIENT: str | Path = os.path.join(os.path.dirname(__file__), "_guard_client.py")
"""The client the hook command runs when the engine serves the guard (see ``GUARD_SOCKET_ENV``)."""
GUARD_SOCKET_ENV: Final = "HARNESS_RUN_GUARD_SOCKET"
"""In a turn's environment: the engine's guard server (then the hook is the small client)."""
GUARD_TOKEN_ENV: Final = "HARNESS_RUN_GUARD_TOKEN"
"""In a turn's environment: the token the guard server asks its clients for."""
GUARD_URL_ENV: Final = "HARNESS_RUN_GUARD_URL"
"""In a turn's environment (Claude Code, model proxy on): the guard server's HTTP address, for a
``PreToolUse`` hook of ``type: http`` with ``onFailure: block`` — no process per tool call."""
GUARD_TIMEOUT_S: float = 10.0
"""Seconds the guard may take before the tool call is denied (the CLI's own hook timeout is longer)."""

WEB_TOOLS: Final = frozenset({"webfetch", "websearch", "web_search", "web_fetch", "fetch"})
AGENT_TOOLS: Final = frozenset({"task", "agent", "spawn_agent", "spawn_agents", "delegate", "subagent"})
WRITE_TOOLS: Final = frozenset(
    {
        "write",
        "edit",
        "multiedit",
        "notebookedit",
        "apply_patch",
        "patch",
        "create_file",
        "str_replace_editor",
    }
)
"""Tools that write or edit files (lower case), for ``approvals.file_writes``."""
QUESTION_TOOLS: Final = frozenset({"askuserquestion"})
"""Tools with which the agent asks the user a question (lower case)."""
_SHELLS: Final = frozenset({"sh", "bash", "dash", "zsh", "ksh", "fish"})
_WRAPPERS: Final = frozenset(
    {"sudo", "exec", "command", "builtin", "nohup", "time", "nice", "ionice", "stdbuf", "xargs", "timeout"}
)
_NET_COMMANDS: Final = frozenset(
    {"curl", "wget", "nc", "ncat", "netcat", "socat", "ssh", "scp", "sftp", "rsync", "telnet", "ftp"}
    | {"http", "https", "aria2c", "lynx", "links", "w3m"}
)
_SPLIT: Final = re.compile(r"\|\||&&|[;|&\n()`]|\$\(")

# (pattern, why): checked against every string of a tool call (file paths, URLs, commands)
_PATHS: Final[tuple[tuple[re.Pattern[str], str], ...]] = tuple(
    (re.compile(p, re.I), why)
    for p, why in (
        (r"/proc/[^\s'\"]*(environ|/mem\b|/env|/e[*?\[])", "reads a process's environment or memory"),
        (r"(^|[\s/'\"=<>:])\.env(\.[\w.-]+)?(?=$|[\s'\";|&)<>])", "reads a .env file"),
        (r"\.aws/", "reads AWS credentials"),
        (r"\.config/gcloud|application_default_credentials", "reads Google Cloud credentials"),
        (r"(^|/)\.(netrc|git-credentials)\b|\.docker/config\.json", "reads a credential file"),
        (
            r"169\.254\.169\.254|169\.254\.170\.2|fd00:ec2::254|\b2852039166\b|0xa9fea9fe",
            "reaches the cloud metadata server",
        ),
        (r"metadata\.google\.internal|\bmetadata\.goog\b", "reaches the cloud metadata server"),
        (
            r"\.claude/settings|\.codex/(config\.toml|hooks\.json)|harness-run/opencode\.json",
            "touches the harness's configuration",
        ),
    )
)
# checked against shell commands only (any spelling of these in a command is refused)
_COMMANDS: Final[tuple[tuple[re.Pattern[str], str], ...]] = tuple(
    (re.compile(p), why)
    for p, why in (
        (r"(?i)\bgit\b[^;&|\n]*\bcredential", "asks git for credentials"),
        (
            r"(?i)\bgit\b[^;&|\n]*\bconfig\b[^;&|\n]*(extraheader|--get-regexp|--list\b|\s-l\b|--show-origin)",
            "lists git's configuration (credentials)",
        ),
        (
            r"GIT_CONFIG_(KEY|VALUE|COUNT|PARAMETERS)|GIT_ASKPASS|HARNESS_RUN_(MCP_|PROXY_TOKEN)",
            "names a credential variable",
        ),
        (
            r"\b(ANTHROPIC_API_KEY|ANTHROPIC_AUTH_TOKEN|CLAUDE_CODE_OAUTH_TOKEN|OPENAI_API_KEY|CODEX_API_KEY"
            r"|OPENROUTER_API_KEY|GOOGLE_APPLICATION_CREDENTIALS|AWS_SECRET_ACCESS_KEY|AWS_SESSION_TOKEN)\b",
            "names a model or cloud credential variable",
        ),
        (
            r"(?i)\bgs://|storage\.googleapis\.com|/storage/v1/b\b|\bgsutil\b|\bgcloud\s+storage\b"
            r"|google\.cloud\b[^;&|\n]*\bstorage\b|STORAGE_EMULATOR_HOST|HARNESS_RUN_STORE\b",
            "reaches Cloud Storage, where the sessions' history is kept",
        ),
    )
)
# reading the environment from code: refused unless the command only searches text for it
# (`grep -rn os.environ src/` is an ordinary code search)
_ENV_READ: Final = re.compile(r"\benviron\b|os\.getenv|\bgetenv\s*\(|process\.env\b|\bENV\[|%ENV\b|\$ENV\{")
_SEARCH: Final = frozenset({"grep", "egrep", "fgrep", "rg", "ag", "ack", "git"})
_NETWORK: Final = re.compile(r"/dev/(tcp|udp)/|\b(urllib|requests|httpx|aiohttp|http\.client|socket)\b")


def encode_rules(rules: Mapping[str, Any]) -> str:
    raw = binascii.b2a_base64(json.dumps(rules, sort_keys=True).encode(), newline=False)
    return raw.decode().replace("+", "-").replace("/", "_")


def decode_rules(text: str) -> dict[str, Any]:
    data = json.loads(binascii.a2b_base64(text.replace("-", "+").replace("_", "/").encode()))
    if not isinstance(data, dict):
        raise ValueError("rules must be a JSON object")
    return _any(data)


def _any(value: object) -> Any:
    """``typing.cast(Any, value)`` without importing typing at run time."""
    return value


def _strs(value: Any) -> list[str]:
    return [str(v) for v in _any(value)] if isinstance(value, list) else []


def _strings(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for key, item in _any(value).items():
            yield key
            yield from _strings(item)
    elif isinstance(value, list):
        for item in _any(value):
            yield from _strings(item)


def _command_of(tool_input: Mapping[str, Any]) -> str | None:
    """The shell command of a tool call, if it is one (``command``/``cmd`` as text or argv)."""
    for key in ("command", "cmd"):
        value = tool_input.get(key)
        if isinstance(value, str):
            return value
        if isinstance(value, list) and value:
            words = [str(w) for w in _any(value)]
            if len(words) >= 3 and os.path.basename(words[0]) in _SHELLS and words[1] in ("-c", "-lc"):
                return words[2]
            return shlex.join(words)
    return None


def _words(segment: str) -> list[str]:
    try:
        return shlex.split(segment, comments=True)
    except ValueError:
        return segment.split()


def _segments(command: str) -> list[list[str]]:
    """The command's simple commands as words, two ways: a quote-aware tokenizer (``bash -c "a | b"``
    stays one command) and a plain split on every separator, even inside quotes, backticks and
    ``$(…)`` (so a command hidden in a quoted argument is seen too)."""
    out: list[list[str]] = []
    try:
        lexer = shlex.shlex(command.replace("\n", ";"), posix=True, punctuation_chars=";&|()<>")
        lexer.whitespace_split = True
        current: list[str] = []
        for token in lexer:
            if token and set(token) <= set(";&|()<>"):
                out.append(current)
                current = []
            else:
                current.append(token)
        out.append(current)
    except ValueError:
        pass
    out.extend(_words(segment) for segment in _SPLIT.split(command))
    return [words for words in out if words]


def _simple_commands(command: str, depth: int = 0) -> Iterator[list[str]]:
    """The simple commands of a shell text, as words: nested ``sh -c``/``eval`` scripts included,
    leading assignments and wrappers (``sudo``, ``exec``, ``env X=1`` …) dropped."""
    for words in _segments(command):
        while words and (
            re.match(r"^[A-Za-z_][A-Za-z0-9_]*=", words[0]) or os.path.basename(words[0]) in _WRAPPERS
        ):
            words = words[1:]
        if not words:
            continue
        words[0] = os.path.basename(words[0].strip("\"'"))
        script = next((i + 1 for i, w in enumerate(words[1:-1], 1) if re.match(r"^-[a-z]*c[a-z]*$", w)), 0)
        if depth < 4 and words[0] in _SHELLS and script:
            yield from _simple_commands(words[script], depth + 1)
        elif depth < 4 and words[0] == "eval":
            yield from _simple_commands(" ".join(words[1:]), depth + 1)
        else:
            yield words


def _dumps_environment(words: list[str]) -> bool:
    head, args = words[0], words[1:]
    if head == "printenv":
        return True
    if head == "env":  # `env` alone (or with options only) prints everything; `env X=1 cmd` runs cmd
        rest = [a for a in args if not a.startswith("-") and "=" not in a]
        return not rest
    if head == "set":
        return not args
    if head in ("export", "declare", "typeset", "readonly"):
        return all(a.startswith("-") for a in args)
    if head == "compgen":
        return any(a in ("-e", "-v") for a in args)
    if head == "ps":  # BSD-style `e` shows each process's environment
        return any(not a.startswith("-") and "e" in a and a.isalpha() for a in args) or "-E" in args
    return False


def _check_command(command: str, rules: Mapping[str, Any]) -> str | None:
    simple = list(_simple_commands(command))
    for pattern in _strs(rules.get("denied_bash_patterns")):
        texts = [command.strip(), *(" ".join(w) for w in simple)]
        if any(fnmatch.fnmatchcase(t, pattern) for t in texts):
            return f"the command matches the denied pattern {pattern!r}"
    if rules.get("deny_network") and (any(w[0] in _NET_COMMANDS for w in simple) or _NETWORK.search(command)):
        return "the agent has no network (security_policy.deny_network)"
    if rules.get("credential_guards"):
        if any(_dumps_environment(w) for w in simple):
            return "the command prints the environment (credential guard)"
        for regex, why in (*_PATHS, *_COMMANDS):
            if regex.search(command):
                return f"the command {why} (credential guard)"
        if _ENV_READ.search(command):
            mentioning = [w for w in simple if _ENV_READ.search(" ".join(w))]
            if not mentioning or any(w[0] not in _SEARCH for w in mentioning):
                return "the command reads the environment (credential guard)"
    return None


def _same_tool(name: str, denied: str) -> bool:
    if name == denied or name.lower() == denied.lower():
        return True
    if denied.startswith("mcp__"):  # OpenCode's form of mcp__server__tool is server_tool
        return name == denied.removeprefix("mcp__").replace("__", "_", 1)
    return False


def verdict(rules: Mapping[str, Any], tool_name: str, tool_input: Mapping[str, Any]) -> str | None:
    """Why the tool call must not run, or None to let it run."""
    for denied in _strs(rules.get("denied_tools")):
        if _same_tool(tool_name, denied):
            return f"the tool {tool_name} is denied by the security policy"
    lower = tool_name.lower()
    if lower in WEB_TOOLS and (rules.get("credential_guards") or rules.get("deny_network")):
        return f"{tool_name} could send data out (credential guard)"
    if lower in AGENT_TOOLS and rules.get("credential_guards"):
        return f"{tool_name} would start a sub-agent outside the guard (credential guard)"
    command = _command_of(tool_input)
    if command is not None:
        return _check_command(command, rules)
    if rules.get("credential_guards"):
        for text in _strings(dict(tool_input)):
            for regex, why in _PATHS:
                if regex.search(text):
                    return f"the {tool_name} call {why} (credential guard)"
    return None


def approval_match(asks: Mapping[str, Any], tool_name: str, tool_input: Mapping[str, Any]) -> str | None:
    """Why the call must wait for a person (the ``approvals`` rule it matches: ``commands``,
    ``tools``, ``file_writes``), or None when it runs without asking."""
    for tool in _strs(asks.get("tools")):
        if _same_tool(tool_name, tool):
            return f"the tool {tool_name} needs approval"
    command = _command_of(tool_input)
    patterns = _strs(asks.get("commands"))
    if command is not None and patterns:
        texts = [command.strip(), *(" ".join(w) for w in _simple_commands(command))]
        for pattern in patterns:
            if any(fnmatch.fnmatchcase(t, pattern) for t in texts):
                return f"the command matches {pattern!r}"
    if asks.get("file_writes") and tool_name.lower() in WRITE_TOOLS:
        return f"{tool_name} writes a file"
    return None


def parse_call(text: str, *, shell: bool = False) -> tuple[str, dict[str, Any]]:
    """A hook's input as ``(tool name, tool input)``: the tool call as JSON (``shell``: OpenCode's
    guarded shell, the command itself). Raises on input that is not a tool call (the caller denies)."""
    parsed = {"tool_name": "bash", "tool_input": {"command": text}} if shell else json.loads(text or "{}")
    if not isinstance(parsed, dict):
        raise ValueError("the tool call is not a JSON object")
    call = _any(parsed)
    tool_input = call.get("tool_input")
    arguments: dict[str, Any] = _any(tool_input) if isinstance(tool_input, dict) else {"command": tool_input}
    return str(call.get("tool_name") or ""), arguments


def decide(rules: Mapping[str, Any], text: str, *, shell: bool = False) -> str | None:
    """The verdict on a hook's input (see :func:`parse_call`). Without the engine's guard server
    (rules with ``approvals``) a call that needs a person's approval is denied: only an engine's
    turn can ask for one. Raises on input that is not a tool call (the caller denies)."""
    name, tool_input = parse_call(text, shell=shell)
    reason = verdict(rules, name, tool_input)
    asks = rules.get("approvals")
    if reason is None and isinstance(asks, dict) and approval_match(_any(asks), name, tool_input):
        return "this tool call needs a person's approval, which only an engine's turn can ask for"
    return reason


def main(argv: list[str]) -> int:
    """Exit 0 (run it) or 2 (deny, reason on stderr). Anything unexpected raises: the hook command
    turns any other exit into 2."""
    reason = decide(decode_rules(argv[1]), sys.stdin.read(), shell=argv[2:3] == ["--shell"])
    if reason is None:
        return 0
    sys.stderr.write(f"harness-run denied this tool call: {reason}\n")
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
