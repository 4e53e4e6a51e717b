"""A person in the loop: the turn's guard pauses a tool call until someone decides (``spec.approvals``).

One :class:`ApprovalDesk` per turn, asked by the :class:`~harness_run.security.GuardBroker` after
the security verdict let a call through. For a call the policy names (a shell command matching
``commands``, a tool in ``tools``, a file write with ``file_writes``) it stores a pending
:class:`~harness_run.store.ApprovalRecord`, emits ``approval_request`` into the turn, and waits until
the record is decided — by ``session.approve``/``deny`` in this process (which wakes the wait at
once through :func:`wake`) or in any other (seen by reading the record every :data:`POLL_S`) — or
until ``expires_at``, when the guard decides it itself: denied, ``by="timeout"``. Then it emits
``approval_decision`` and answers the hook. Claude Code's ``AskUserQuestion`` is a ``question`` the
same way: the answer goes back to the model as the tool's error text ("The user answered: …").

It fails closed: a store that cannot be written or read, a request that vanished, a turn that ends
while a call waits — each is a deny. While a call waits, the turn's own ``timeout`` is paused.
"""

from __future__ import annotations

import asyncio
import contextlib
import difflib
import logging
import os
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, Protocol, cast

from harness_run.errors import HarnessRunError, UsageError
from harness_run.events import (
    AgentEvent,
    ApprovalDecisionEvent,
    ApprovalRequestEvent,
    QuestionAnswerEvent,
    QuestionEvent,
)
from harness_run.harness import QUESTION_TOOLS, WRITE_TOOLS, approval_match, approval_rules
from harness_run.spec import ApprovalPolicy
from harness_run.store import ApprovalRecord, ApprovalStore

__all__ = ["POLL_S", "QUESTIONS_OFF", "ApprovalDesk", "ApprovalSink", "wake"]

_log = logging.getLogger("harness_run.security")

POLL_S: Final = 0.2
"""How often a waiting call reads its record (a decision from another process); one read each."""
_DIFF_MAX: Final = 256 * 1024
"""Files larger than this get no diff in the request (the path and the input still show the change)."""
QUESTIONS_OFF: Final = (
    "questions are off: nobody is watching this turn to answer (the agent has no `approvals` policy); "
    "decide yourself and go on"
)

_waiting: dict[tuple[str, str], tuple[asyncio.AbstractEventLoop, asyncio.Event]] = {}
_waiting_lock = threading.Lock()


def wake(session_id: str, request_id: str) -> None:
    """Tell a call waiting in this process that its record was decided (from any thread)."""
    with _waiting_lock:
        found = _waiting.get((session_id, request_id))
    if found is not None:
        loop, event = found
        with contextlib.suppress(RuntimeError):  # its loop has closed: nobody waits any more
            loop.call_soon_threadsafe(event.set)


class TurnClock(Protocol):
    """The turn's own ``timeout`` (the runtime's turn process)."""

    def pause_deadline(self) -> None:
        """Stop it (the first call starts waiting)."""
        ...

    def resume_deadline(self) -> None:
        """Start it again with the time it had left (the last waiting call was decided)."""
        ...


@dataclass(frozen=True, slots=True)
class ApprovalSink:
    """Where a turn's approvals go: its store and session, its event stream, and its deadline."""

    store: Any
    """The history store (an :class:`~harness_run.store.ApprovalStore`; anything else: every call
    that would wait is denied)."""
    session_id: str
    turn: int
    emit: Callable[[AgentEvent], None]
    workspace: Path | None = None
    """The turn's workspace: edits of files inside it get a diff in the request."""
    clock: TurnClock | None = None
    """The turn's deadline, stopped while any call waits."""
    flush: Callable[[], None] | None = None
    """Write the turn's events to the store now (others see the request in its history at once)."""


class ApprovalDesk:
    """One turn's approvals (see the module docstring)."""

    def __init__(self, policy: ApprovalPolicy | None) -> None:
        self.policy = policy
        self._asks = approval_rules(policy)
        self._sink: ApprovalSink | None = None
        self._open: dict[str, ApprovalRecord] = {}
        """Requests waiting now, by id."""
        self._closed = False

    @property
    def active(self) -> bool:
        """Whether any call may wait (a policy that names something)."""
        return self._asks is not None

    def attach(self, sink: ApprovalSink) -> None:
        self._sink = sink

    # --- the hook's question --------------------------------------------------------------------

    async def consult(self, tool: str, tool_input: Mapping[str, Any]) -> tuple[bool, str | None]:
        """``(allowed, message)`` for a call the security verdict let through: ``(True, None)`` runs
        it; ``(False, text)`` refuses it with ``text`` as the tool's error (a deny's reason, or the
        answer to a question)."""
        if tool.lower() in QUESTION_TOOLS:
            if self._asks is None and self.policy is None:
                return False, QUESTIONS_OFF
            return False, await self._question(tool, tool_input)
        if self._asks is None or approval_match(self._asks, tool, tool_input) is None:
            return True, None
        return await self._approval(tool, dict(tool_input))

    async def _approval(self, tool: str, tool_input: dict[str, Any]) -> tuple[bool, str | None]:
        sink, policy = self._sink, self.policy
        if sink is None or policy is None or not isinstance(sink.store, ApprovalStore):
            return False, "this tool call needs a person's approval, and this turn cannot ask for one"
        path, diff = _file_change(tool, tool_input, sink.workspace)
        command = tool_input.get("command") or tool_input.get("cmd")
        now = time.time()
        record = ApprovalRecord(
            session_id=sink.session_id,
            turn=sink.turn,
            request_id=f"apr-{uuid.uuid4().hex[:16]}",
            tool=tool,
            command=_command_text(command),
            input=tool_input,
            path=path,
            diff=diff,
            created_at=now,
            expires_at=now + policy.timeout_s,
        )
        decided = await self._wait(sink, record)
        if decided.decision == "allow":
            return True, None
        if decided.by == "client":
            why = decided.reason or "no reason given"
            return False, f"a person denied this tool call, so it did not run. Their reason: {why}"
        return False, f"this tool call did not run: {decided.reason or 'nobody approved it in time'}"

    async def _question(self, tool: str, tool_input: Mapping[str, Any]) -> str:
        sink, policy = self._sink, self.policy
        if sink is None or policy is None or not isinstance(sink.store, ApprovalStore):
            return QUESTIONS_OFF
        question, options = _question_of(tool_input)
        now = time.time()
        record = ApprovalRecord(
            session_id=sink.session_id,
            turn=sink.turn,
            request_id=f"qst-{uuid.uuid4().hex[:16]}",
            kind="question",
            tool=tool,
            input=dict(tool_input),
            question=question,
            options=options,
            created_at=now,
            expires_at=now + policy.timeout_s,
        )
        decided = await self._wait(sink, record)
        if decided.answer is None:
            why = decided.reason or "no answer in time"
            return f"The user did not answer ({why}); decide yourself and go on."
        return f"The user answered: {decided.answer}"

    # --- waiting --------------------------------------------------------------------------------

    async def _wait(self, sink: ApprovalSink, record: ApprovalRecord) -> ApprovalRecord:
        """Store the request, announce it, wait for its decision; whatever fails, a deny."""
        store: ApprovalStore = sink.store
        key = (record.session_id, record.request_id)
        woken = asyncio.Event()
        with _waiting_lock:
            _waiting[key] = (asyncio.get_running_loop(), woken)
        self._open[record.request_id] = record
        if len(self._open) == 1 and sink.clock is not None:
            sink.clock.pause_deadline()  # the turn's own timeout does not run while a person decides
        try:
            await asyncio.to_thread(store.put_approval, record)
            sink.emit(_request_event(record))
            if sink.flush is not None:
                sink.flush()
            decided = await self._until_decided(store, record, woken)
        except asyncio.CancelledError:
            if record.request_id in self._open:  # the turn ended under it (not settled by end_waits)
                self._settle(sink, record, "the turn ended before anyone decided")
            raise
        except Exception as exc:  # fail closed: a store that fails, a record that vanished …
            _log.warning("an approval request failed (%s): the tool call is denied", type(exc).__name__)
            why = f"the approval path failed ({type(exc).__name__}), so it is denied"
            decided = await asyncio.to_thread(self._force, store, record, why)
        finally:
            with _waiting_lock:
                _waiting.pop(key, None)
        if record.request_id in self._open:  # else end_waits settled (and announced) it already
            self._done(sink, record.request_id)
            sink.emit(_decision_event(decided))
        return decided

    async def _until_decided(
        self, store: ApprovalStore, record: ApprovalRecord, woken: asyncio.Event
    ) -> ApprovalRecord:
        while True:
            left = record.expires_at - time.time()
            if left <= 0:
                return await asyncio.to_thread(
                    self._force, store, record, f"nobody decided within {self._timeout(record):g} s"
                )
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(woken.wait(), min(POLL_S, left))
            woken.clear()
            got = await asyncio.to_thread(store.get_approval, record.session_id, record.request_id)
            if got is None:
                raise LookupError("the approval request vanished from the store")
            if not got.pending:
                return got

    @staticmethod
    def _timeout(record: ApprovalRecord) -> float:
        return round(record.expires_at - record.created_at, 3)

    @staticmethod
    def _force(store: ApprovalStore, record: ApprovalRecord, reason: str) -> ApprovalRecord:
        """Decide ``record`` as denied by the guard; a decision that came first wins (and is
        returned); a store that cannot say denies all the same."""
        try:
            return store.decide_approval(
                record.session_id,
                record.request_id,
                decision="deny" if record.kind == "approval" else None,
                by="timeout",
                reason=reason,
            )
        except UsageError:  # decided meanwhile: the first decision stands
            with contextlib.suppress(HarnessRunError):
                got = store.get_approval(record.session_id, record.request_id)
                if got is not None and not got.pending:
                    return got
        except HarnessRunError:
            pass
        denied = {"decision": "deny"} if record.kind == "approval" else {}
        return record.model_copy(
            update={**denied, "by": "timeout", "reason": reason, "decided_at": time.time()}
        )

    def _done(self, sink: ApprovalSink, request_id: str) -> None:
        self._open.pop(request_id, None)
        if not self._open and sink.clock is not None:
            sink.clock.resume_deadline()

    def _settle(self, sink: ApprovalSink, record: ApprovalRecord, reason: str) -> None:
        """Deny a waiting call now (synchronously) and announce it, unless the turn's result is out."""
        self._done(sink, record.request_id)
        decided = self._force(sink.store, record, reason)
        if not self._closed:
            sink.emit(_decision_event(decided))

    def end_waits(self, reason: str = "the turn ended before anyone decided") -> None:
        """The turn is ending (its CLI has exited or was stopped): every call still waiting is denied
        now, its decision emitted before the turn's result. Synchronous: one store write each."""
        sink = self._sink
        if sink is None:
            return
        for record in list(self._open.values()):
            self._settle(sink, record, reason)

    def close(self) -> None:
        """No more events (the turn's result is out): waits still open are settled in the store only."""
        self._closed = True
        self.end_waits()


def _request_event(record: ApprovalRecord) -> AgentEvent:
    if record.kind == "question":
        return QuestionEvent(
            request_id=record.request_id,
            question=record.question or "",
            options=list(record.options),
            expires_at=record.expires_at,
        )
    return ApprovalRequestEvent(
        request_id=record.request_id,
        tool=record.tool,
        command=record.command,
        input=record.input,
        expires_at=record.expires_at,
        path=record.path,
        diff=record.diff,
    )


def _decision_event(record: ApprovalRecord) -> AgentEvent:
    by = record.by or "timeout"
    if record.kind == "question":
        return QuestionAnswerEvent(
            request_id=record.request_id, answer=record.answer, by=by, key_id=record.key_id
        )
    return ApprovalDecisionEvent(
        request_id=record.request_id,
        decision=record.decision or "deny",
        by=by,
        reason=record.reason,
        key_id=record.key_id,
    )


def _command_text(command: Any) -> str | None:
    if isinstance(command, str):
        return command
    if isinstance(command, list) and command:
        words = [str(w) for w in cast("list[Any]", command)]
        return words[2] if len(words) >= 3 and words[1] in ("-c", "-lc") else " ".join(words)
    return None


def _question_of(tool_input: Mapping[str, Any]) -> tuple[str, list[str]]:
    """Claude Code's ``AskUserQuestion`` input (``questions: [{question, options: [{label}]}]``) as
    one text and the options' labels."""
    questions: Any = tool_input.get("questions")
    if not isinstance(questions, list) or not questions:
        text = tool_input.get("question")
        return (str(text) if text else "(the agent asked without a question)"), []
    texts: list[str] = []
    options: list[str] = []
    for item in questions:  # pyright: ignore[reportUnknownVariableType]
        if isinstance(item, dict):
            texts.append(str(item.get("question", "")))  # pyright: ignore[reportUnknownMemberType, reportUnknownArgumentType]
            for option in item.get("options") or []:  # pyright: ignore[reportUnknownMemberType, reportUnknownVariableType]
                label = option.get("label") if isinstance(option, dict) else option  # pyright: ignore[reportUnknownMemberType, reportUnknownVariableType]
                if label:
                    options.append(str(label))  # pyright: ignore[reportUnknownArgumentType]
    return "\n".join(t for t in texts if t), options


def _file_change(
    tool: str, tool_input: Mapping[str, Any], workspace: Path | None
) -> tuple[str | None, str | None]:
    """The written file's path and, where cheap (a file inside the workspace, not too large), a
    unified diff of the change."""
    if tool.lower() not in WRITE_TOOLS:
        return None, None
    raw = tool_input.get("file_path") or tool_input.get("path") or tool_input.get("notebook_path")
    if not isinstance(raw, str) or not raw:
        return None, None
    if workspace is None:
        return raw, None
    try:
        return raw, _diff(tool.lower(), tool_input, workspace, raw)
    except (OSError, ValueError, UnicodeDecodeError):
        return raw, None


def _diff(tool: str, tool_input: Mapping[str, Any], workspace: Path, raw: str) -> str | None:
    root = workspace.resolve()
    target = (root / raw).resolve()
    if not target.is_relative_to(root):  # only the workspace's files: nothing else is read here
        return None
    old = ""
    if target.exists():
        if not target.is_file() or target.stat().st_size > _DIFF_MAX:
            return None
        old = target.read_text(encoding="utf-8")
    if tool == "write":
        new = str(tool_input.get("content", ""))
    elif tool == "edit":
        before, after = str(tool_input.get("old_string", "")), str(tool_input.get("new_string", ""))
        if not before or before not in old:
            return None
        new = old.replace(before, after) if tool_input.get("replace_all") else old.replace(before, after, 1)
    else:
        return None
    name = os.path.relpath(target, root)
    lines = difflib.unified_diff(
        old.splitlines(keepends=True), new.splitlines(keepends=True), f"a/{name}", f"b/{name}"
    )
    text = "".join(lines)
    return text[:_DIFF_MAX] or None
