"""``Run``: one turn, awaitable (-> RunResult), async-iterable (-> AgentEvent, live) and pollable."""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Generator
from typing import TYPE_CHECKING, Any, Literal, Protocol

from harness_run.errors import UsageError
from harness_run.events import AgentEvent, DeltaEvent, ResultEvent, RunResult

if TYPE_CHECKING:
    from harness_run.store import ApprovalRecord

__all__ = ["Run", "RunStatus"]

RunStatus = Literal["running", "completed", "failed"]


class _Approver(Protocol):
    """The session's side of approvals (``Session.approve``/``deny``/``answer``)."""

    async def approve(self, request_id: str, *, key_id: str | None = None) -> ApprovalRecord: ...

    async def deny(
        self, request_id: str, reason: str | None = None, *, key_id: str | None = None
    ) -> ApprovalRecord: ...

    async def answer(self, request_id: str, text: str, *, key_id: str | None = None) -> ApprovalRecord: ...


class Run:
    """A turn in progress or finished.

    - ``await run`` gives the :class:`RunResult` (cancelling the await cancels the turn);
    - ``async for event in run`` yields every event from the first, live, ending with the result;
      iterate as often as you like (text ``delta`` events included: they are live only, never in
      ``run.events`` or the history). The result comes once the session has stored and released
      the turn, so a ``session.send()`` right after the loop starts the next turn;
    - ``run.done`` / ``run.status`` / ``run.result`` poll without blocking.
    """

    def __init__(
        self,
        session_id: str,
        turn: int,
        prompt: str,
        message_id: str | None = None,
        *,
        followed: bool = False,
    ) -> None:
        self.session_id = session_id
        self.followed = followed
        """A turn another process started, followed here from the store: it cannot be steered from
        this process (a message sent meanwhile is refused, not dropped)."""
        self.turn = turn
        self.prompt = prompt
        self.message_id = message_id or uuid.uuid4().hex
        """The id of the turn's prompt message (its first ``user`` event carries it)."""
        self.started_at = time.time()
        self._events: list[AgentEvent] = []
        """The turn's events as stored (no deltas); ``seq`` is the position here."""
        self._stream: list[AgentEvent] = []
        """Everything emitted, in order: the stored events and the live-only deltas between them."""
        self._changed = asyncio.Event()
        self._result: RunResult | None = None
        self._task: asyncio.Task[RunResult] | None = None
        self._interrupt: Callable[[], Awaitable[None]] | None = None
        self._kill: Callable[[], Awaitable[None]] | None = None
        self._steer: Callable[[str, str], Awaitable[bool]] | None = None
        self._message_ids: dict[str, asyncio.Future[bool]] = {}
        self.approver: _Approver | None = None
        """The session that decides this turn's approval requests (set by the session)."""
        self.flushed = 0
        """How many leading events a runtime has already written to the history store mid-turn;
        the end-of-turn write appends only the rest."""

    # --- wiring used by runtimes (not for applications) ----------------------------------------

    def start(self, body: Coroutine[Any, Any, RunResult]) -> None:
        """Run ``body`` (the turn) as this run's task."""
        self._task = asyncio.get_running_loop().create_task(body, name=f"harness-run turn {self.turn}")

    def bind(
        self,
        *,
        interrupt: Callable[[], Awaitable[None]],
        steer: Callable[[str, str], Awaitable[bool]],
        kill: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        """Connect ``interrupt()``/``steer()`` to the running process. ``steer(text, message_id)``
        delivers one message, returns whether it did, and sees to it that the turn gets one ``user``
        event with that id (the local runtime emits it; a remote one relays the worker's); it is
        called at most once per message id (``Run.steer`` drops duplicates). ``kill()`` ends the
        turn's processes at once (``engine.aclose(kill=True)``); without it a kill cancels the turn."""
        self._interrupt, self._steer, self._kill = interrupt, steer, kill

    async def stop(self, grace: float) -> None:
        """End the turn for good and wait until it has (``engine.aclose()``): interrupt it, or cancel
        it when it cannot be interrupted (still preparing, or followed from another process) or has
        not ended ``grace`` seconds after the interrupt. Only a turn of the running event loop can be
        stopped; another loop's is left alone."""
        task = self._task
        if task is None or task.done() or task.get_loop() is not asyncio.get_running_loop():
            return
        if self._interrupt is not None and not self.done:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._interrupt(), grace)
            await asyncio.wait({task}, timeout=grace)
        if not task.done():
            task.cancel()
            await asyncio.wait({task})

    async def kill(self, grace: float) -> None:
        """End the turn now and wait until it has (``engine.aclose(kill=True)``): its processes are
        killed without a grace period (SIGKILL) and the turn is given ``grace`` seconds to store its
        result; a turn that cannot be killed that way (still preparing, remote, followed) is
        cancelled at once. Only a turn of the running event loop can be killed."""
        task = self._task
        if task is None or task.done() or task.get_loop() is not asyncio.get_running_loop():
            return
        if self._kill is not None and not self.done:
            with contextlib.suppress(Exception):
                await self._kill()
            await asyncio.wait({task}, timeout=grace)
        if not task.done():
            await asyncio.sleep(0)  # a task cancelled before its first step would store nothing
            task.cancel()
            await asyncio.wait({task})

    def emit(self, event: AgentEvent) -> AgentEvent:
        """Number, time-stamp and publish an event to iterators. A :class:`DeltaEvent` is live only:
        iterators get it, ``events`` (what runtimes store) does not, and it takes the ``seq`` of the
        last stored event before it, so stored numbering does not depend on streaming."""
        if isinstance(event, DeltaEvent):
            seq = max(len(self._events) - 1, 0)
            event = event.model_copy(update={"seq": seq, "turn": self.turn, "ts": time.time()})
            self._stream.append(event)
            self._changed.set()
            self._changed = asyncio.Event()
            return event
        event = event.model_copy(update={"seq": len(self._events), "turn": self.turn, "ts": time.time()})
        self._events.append(event)
        self._stream.append(event)
        if isinstance(event, ResultEvent):
            self._result = event.result
        self._changed.set()
        self._changed = asyncio.Event()
        return event

    # --- public ------------------------------------------------------------------------------

    @property
    def done(self) -> bool:
        return self._result is not None

    @property
    def status(self) -> RunStatus:
        if self._result is None:
            return "running"
        return "failed" if self._result.is_error else "completed"

    @property
    def result(self) -> RunResult | None:
        """The result once the turn has ended, else None."""
        return self._result

    @property
    def events(self) -> list[AgentEvent]:
        """The events so far as stored in history (a copy; no ``delta`` events)."""
        return list(self._events)

    async def wait(self) -> RunResult:
        """The result, once the turn has ended (what ``await run`` does)."""
        task = self._task
        if task is None:
            raise RuntimeError("this run was never started")
        try:
            return await task
        except asyncio.CancelledError:
            current = asyncio.current_task()
            if task.cancelled() and self._result is not None and not (current and current.cancelling()):
                return self._result  # the turn was cancelled by someone else (engine.aclose()): its result
            raise

    @property
    def settling(self) -> bool:
        """The result is out but the session is still applying the turn (storing it, releasing its
        workspace and lease); the next turn can start once it has (``await run.settled()``)."""
        return self._result is not None and self._task is not None and not self._task.done()

    async def settled(self) -> None:
        """Wait until the session has applied the turn, however it ended (never raises for it)."""
        task = self._task
        if task is not None and not task.done():
            await asyncio.wait({task})

    def __await__(self) -> Generator[Any, None, RunResult]:
        return self.wait().__await__()

    def __aiter__(self) -> AsyncIterator[AgentEvent]:
        return self._iterate(after=-1, attached=0, tip=-1)

    def follow(self, after: int = -1) -> AsyncIterator[AgentEvent]:
        """What a subscriber joining now gets (the server's and worker's streams): the stored
        events after seq ``after``, live, ending with the result; of the deltas only those from now
        on, and those of the message being streamed when it joined (after the last stored event)
        unless that event is ``after`` — whoever read it saw them, so a re-connecting stream gets
        no text twice, and a finished turn replays none."""
        return self._iterate(after=after, attached=len(self._stream), tip=len(self._events) - 1)

    async def _iterate(self, *, after: int, attached: int, tip: int) -> AsyncIterator[AgentEvent]:
        index = 0
        while True:
            while index < len(self._stream):
                event = self._stream[index]
                index += 1
                if event.type != "delta":
                    if event.seq <= after:
                        continue
                elif index <= attached and (event.seq != tip or event.seq <= after):
                    continue
                if isinstance(event, ResultEvent):
                    await self.settled()  # then a send() right after the loop starts the next turn
                yield event
                if isinstance(event, ResultEvent):
                    return
            if self._task is not None and self._task.done() and index >= len(self._stream):
                self._task.result()  # surface an unexpected failure of the turn task
                return
            waiter = self._changed
            if self._task is None:
                await waiter.wait()
            else:
                changed = asyncio.ensure_future(waiter.wait())
                try:
                    await asyncio.wait([changed, self._task], return_when=asyncio.FIRST_COMPLETED)
                finally:
                    changed.cancel()

    async def interrupt(self) -> None:
        """Stop the turn now; its result gets ``stop_reason="interrupted"``."""
        if self._interrupt is not None and not self.done:
            await self._interrupt()

    async def steer(self, text: str, message_id: str | None = None) -> bool:
        """Add a user message to the running turn; True once it was delivered.

        A message id already seen in this turn (the prompt's, or an earlier steer's) is not
        delivered again: the outcome of the first delivery is returned. False if the turn had
        already ended, or its harness cannot take messages mid-turn.
        """
        message_id = message_id or uuid.uuid4().hex
        if message_id == self.message_id:
            return True
        if message_id in self._message_ids:
            return await asyncio.shield(self._message_ids[message_id])
        outcome: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        self._message_ids[message_id] = outcome
        try:
            delivered = self._steer is not None and not self.done and await self._steer(text, message_id)
        except BaseException:
            outcome.set_result(False)
            raise
        outcome.set_result(delivered)
        if not delivered:  # never delivered: the same id may be tried again (e.g. as the next turn)
            del self._message_ids[message_id]
        return delivered

    # --- a person in the loop (spec.approvals): the session decides ----------------------------

    def _session(self) -> _Approver:
        if self.approver is None:
            raise UsageError(
                f"this run of session {self.session_id} is not bound to a session; decide with "
                "session.approve/deny/answer"
            )
        return self.approver

    async def approve(self, request_id: str) -> ApprovalRecord:
        """Let the tool call of an ``approval_request`` event run (``session.approve``)."""
        return await self._session().approve(request_id)

    async def deny(self, request_id: str, reason: str | None = None) -> ApprovalRecord:
        """Refuse it; the model gets ``reason`` as the tool's error (``session.deny``)."""
        return await self._session().deny(request_id, reason)

    async def answer(self, request_id: str, text: str) -> ApprovalRecord:
        """Answer a ``question`` event (``session.answer``)."""
        return await self._session().answer(request_id, text)

    def __repr__(self) -> str:
        return f"<Run session={self.session_id} turn={self.turn} status={self.status}>"
