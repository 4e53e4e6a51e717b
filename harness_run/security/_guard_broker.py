"""The guard served by the engine: each tool call's verdict from a process that is already running.

One :class:`GuardBroker` per turn, like the git broker: a unix socket in a 0700 directory (opened
to the agent's uid when it runs as another one) and a random per-turn token. :meth:`substitute`
puts both in the turn's environment, where the drivers find them and make the hook command the small
client (``_guard_client.py``: a Python start and the built-in ``_socket``, ~15 ms) instead of the
self-contained guard script (~35 ms: it imports ``re``/``json``/``shlex`` and compiles its rules on
every tool call). The verdict is the same function (:func:`~harness_run.harness.decide`)
over the same rules, run here on the engine's event loop.

It fails closed: the server answers ``allow`` only when the token is the turn's and the verdict
let the call run; a wrong token, unreadable input or a verdict that raises gets ``deny``; a server
that is gone, hangs or drops the connection leaves the client without ``allow``, which the hook's
wrapper turns into exit 2 (deny), as for the script.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any, Final

from harness_run.harness import (
    GUARD_SOCKET_ENV,
    GUARD_TIMEOUT_S,
    GUARD_TOKEN_ENV,
    QUESTION_TOOLS,
    guard_rules,
    guard_verdict,
    parse_call,
)
from harness_run.security._approvals import ApprovalDesk
from harness_run.security._socket import SocketBroker
from harness_run.spec import ApprovalPolicy, SecurityPolicy

__all__ = ["GuardBroker"]

_log = logging.getLogger("harness_run.security")

_MAX_CALL: Final = 64 * 1024**2
"""The largest tool call read (a Write of a big file carries its content); larger is denied."""
_INLINE: Final = 256 * 1024
"""Tool calls up to this size are judged on the event loop (well under a millisecond); larger in a
thread, so a big file's content never stalls the turn's other work."""
_FAILED: Final = b"deny\nharness-run denied this tool call: the guard failed, so nothing runs\n"


class GuardBroker(SocketBroker):
    """Answers the guard hook of one turn (see the module docstring)."""

    def __init__(self, agent_uid: int | None = None) -> None:
        """``agent_uid``: the agent runs as this other uid (the socket is opened to it)."""
        super().__init__("hr-guard-", "hrk-", agent_uid)
        self._rules: dict[str, Any] | None = None
        self.desk = ApprovalDesk(None)
        """The turn's approvals: calls that wait for a person (after the verdict let them through)."""
        self.allowed = 0
        self.denied = 0

    def substitute(
        self, policy: SecurityPolicy, env: dict[str, str], approvals: ApprovalPolicy | None = None
    ) -> dict[str, str]:
        """``env`` naming this turn's guard server (unchanged when the policy enforces nothing and
        no call waits for approval)."""
        self.desk = ApprovalDesk(approvals)
        if not policy.enforces_anything and not self.desk.active:
            return env
        self._rules = guard_rules(policy)
        return {**env, GUARD_SOCKET_ENV: self.socket_path, GUARD_TOKEN_ENV: self.token}

    async def start(self) -> None:
        if self._rules is not None and self._server is None:
            await self._listen(self._serve)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        reply = _FAILED
        try:
            head = await asyncio.wait_for(reader.readline(), GUARD_TIMEOUT_S)
            token, _, mode = head.decode(errors="replace").strip().partition(" ")
            body = await asyncio.wait_for(_read_all(reader), GUARD_TIMEOUT_S)
            reason = await self._judge(token, body, shell=mode == "shell")
            reply = b"allow\n" if reason is None else f"deny\n{reason}\n".encode()
        except PermissionError:  # not this turn's token: "deny" (counted)
            pass
        except Exception as exc:  # fail closed: whatever went wrong, the answer stays "deny"
            _log.warning("the guard denied a tool call it could not judge (%s)", type(exc).__name__)
            self.denied += 1
        with contextlib.suppress(OSError):
            writer.write(reply)
            await writer.drain()
        writer.close()

    async def http_verdict(self, token: str, body: bytes) -> tuple[int, dict[str, Any]]:
        """The answer to Claude Code's HTTP ``PreToolUse`` hook (``type: http``, ``onFailure: block``,
        served on the model proxy's port): 200 ``{}`` allows; 200 with a ``deny`` decision denies,
        giving the reason; a wrong token or a call it cannot judge gets 401/500, which that hook
        treats as a block too."""
        try:
            reason = await self._judge(token, body, shell=False)
        except PermissionError:
            return 401, {"error": "harness-run guard: no valid turn token"}
        except Exception as exc:  # fail closed
            _log.warning("the guard denied a tool call it could not judge (%s)", type(exc).__name__)
            self.denied += 1
            return 500, {"error": "harness-run denied this tool call: the guard failed, so nothing runs"}
        if reason is None:
            return 200, {}
        decision = {
            "hookEventName": "PreToolUse",
            "permissionDecision": "deny",
            "permissionDecisionReason": reason,
        }
        return 200, {"hookSpecificOutput": decision}

    async def _judge(self, token: str, body: bytes, *, shell: bool) -> str | None:
        """None to allow the call in ``body``, else the text the harness shows the model for the
        refused call; PermissionError for a token that is not this turn's (or a broker that no
        longer judges). A call the verdict lets through may then wait for a person (:attr:`desk`)."""
        rules = self._rules
        if rules is None or not self._accepts(token):
            self.denied += 1
            raise PermissionError("not this turn's guard token")
        if len(body) > _MAX_CALL:
            raise ValueError("the tool call is larger than the guard reads")
        text = body.decode(errors="replace")
        if len(body) <= _INLINE:
            tool, tool_input = parse_call(text, shell=shell)
            reason = guard_verdict(rules, tool, tool_input)
        else:
            tool, tool_input = await asyncio.to_thread(parse_call, text, shell=shell)
            reason = await asyncio.to_thread(guard_verdict, rules, tool, tool_input)
        message = None if reason is None else f"harness-run denied this tool call: {reason}"
        if message is None and (self.desk.active or tool.lower() in QUESTION_TOOLS):
            allowed, message = await self.desk.consult(tool, tool_input)
            message = None if allowed else message or "harness-run denied this tool call"
        if message is None:
            self.allowed += 1
        else:
            self.denied += 1
        return message

    async def aclose(self) -> None:
        self._rules = None
        self.desk.close()  # calls still waiting: denied (in the store; the turn's result is out)
        await self._remove()


async def _read_all(reader: asyncio.StreamReader) -> bytes:
    """The rest of the request (the client shuts its side when it has sent the tool call)."""
    body = bytearray()
    while chunk := await reader.read(65536):
        body += chunk
        if len(body) > _MAX_CALL:
            raise ValueError("the tool call is larger than the guard reads")
    return bytes(body)
