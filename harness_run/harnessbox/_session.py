"""A HarnessBox session: a harness-run :class:`~harness_run.runtime.Session` under HarnessBox's names.

``send_message`` starts a turn and returns a :class:`MessageStream`: iterate it for
:class:`StreamEvent` s (``event.delta`` is the assistant's new text), or await it for the turn's
:class:`~harness_run.RunResult` (``.text``). ``kill()`` is ``session.aclose()``: the running turn
stops, the work is committed and pushed to the session's branch (when the workspace config says
so), and the sandbox or container is released. A tool call that waits for a person (the spec's
``approvals``) comes as an ``approval_request`` event in the stream; ``approve``/``deny`` decide it.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Generator, Mapping
from dataclasses import dataclass
from typing import Any

from harness_run.events import AgentEvent, DeltaEvent, MessageEvent, RunResult
from harness_run.runtime import ExecResult, Run, Session
from harness_run.store import ApprovalRecord

__all__ = ["HarnessBoxSession", "MessageStream", "StreamEvent"]


@dataclass(frozen=True, slots=True)
class StreamEvent:
    """One event of a streamed turn, as HarnessBox shows it.

    ``delta`` is new assistant text: a ``delta`` event's piece, or the whole text of a ``message``
    that arrived without deltas before it (harnesses that do not stream pieces) — so printing every
    ``event.delta or ""`` prints each answer once. ``None`` for every other event. ``type`` and
    ``event`` are harness-run's own event (``tool_use``, ``tool_result``, ``result``, …)."""

    type: str
    delta: str | None
    event: AgentEvent


class MessageStream:
    """A turn started by ``send_message``: ``async for event in it`` streams :class:`StreamEvent` s,
    ``await it`` gives the turn's :class:`~harness_run.RunResult` (``.text``, ``.is_error``,
    ``.commit_sha``…). Both may be used, in either order."""

    def __init__(self, run: Run | Callable[[], Awaitable[Run]]) -> None:
        self._run = run if isinstance(run, Run) else None
        self._start = None if isinstance(run, Run) else run

    async def started(self) -> Run:
        """The harness-run ``Run`` of the turn (``interrupt()``, ``steer()``, ``events``), started
        now if ``hb.send_message`` deferred it."""
        if self._run is None:
            assert self._start is not None
            self._run = await self._start()
        return self._run

    async def __aiter__(self) -> AsyncIterator[StreamEvent]:
        streamed = False  # deltas came for the message being written
        async for event in await self.started():
            delta: str | None = None
            if isinstance(event, DeltaEvent):
                streamed, delta = True, event.text
            elif isinstance(event, MessageEvent):
                delta = None if streamed else event.text
                streamed = False
            yield StreamEvent(type=event.type, delta=delta, event=event)

    def __await__(self) -> Generator[Any, None, RunResult]:
        return self._result().__await__()

    async def _result(self) -> RunResult:
        return await (await self.started()).wait()

    async def text(self) -> str:
        """The turn's final text (waits for the turn)."""
        return (await self._result()).text


class HarnessBoxSession:
    """One agent session of a :class:`~harness_run.harnessbox.HarnessBox`, on its own branch (with a
    repo) and workspace. Made by ``await hb.create_session(branch=...)``."""

    def __init__(
        self, session: Session, *, branch: str | None, secrets: Callable[[], Mapping[str, str]]
    ) -> None:
        self.session = session
        """The harness-run session underneath (history, transcript, exec, …)."""
        self.branch = branch
        """The branch the session works on (None without a repo)."""
        self._secrets = secrets
        self.killed = False

    @property
    def session_id(self) -> str:
        return self.session.session_id

    def __repr__(self) -> str:
        return f"<HarnessBoxSession {self.session_id} branch={self.branch!r}>"

    def send_message(self, message: str, *, stream: bool = True) -> MessageStream:
        """Start a turn with ``message``. ``async for event in session.send_message(...)`` streams it;
        ``await session.send_message(..., stream=False)`` returns the result (``.text``). ``stream``
        only documents the intent: the returned :class:`MessageStream` does both."""
        del stream
        return MessageStream(self.session.run(message, secrets=self._secrets()))

    def pending_approvals(self) -> list[ApprovalRecord]:
        """Tool calls and questions of the running turn waiting for a decision (``approval_request``
        and ``question`` events in the ``send_message`` stream announce them)."""
        return self.session.pending_approvals()

    async def approve(self, request_id: str) -> None:
        """Let the waiting tool call run."""
        await self.session.approve(request_id)

    async def deny(self, request_id: str, reason: str | None = None) -> None:
        """Refuse the waiting tool call; the model gets ``reason`` as the tool's error."""
        await self.session.deny(request_id, reason)

    async def answer(self, request_id: str, text: str) -> None:
        """Answer the agent's question."""
        await self.session.answer(request_id, text)

    async def run_command(self, command: str, *, timeout: float = 120.0) -> ExecResult:
        """Run a shell command in the session's workspace (``exit_code``, ``stdout``, ``stderr``)."""
        return await self.session.exec(command, timeout=timeout)

    async def kill(self) -> None:
        """End the session: stop a running turn, commit and push its work to its branch (unless the
        workspace config says ``commit_on_exit=False``), release its sandbox or container. A failed
        push raises ``RunError``; the work stays committed. Killing it again does nothing."""
        if self.killed:
            return
        self.killed = True
        await self.session.aclose()

    @property
    def commit_sha(self) -> str | None:
        """The last commit the session made of its work (after a turn or ``kill()``)."""
        return self.session.record.commit_sha

    @property
    def pushed_ref(self) -> str | None:
        """``refs/heads/<branch>`` once the work was pushed."""
        return self.session.record.pushed_ref
