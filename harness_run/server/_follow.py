"""Following a session's events without re-reading its log: what wakes a session's streams.

A stream reads the stored events after its cursor once, then follows a turn running in this process
live (``Run.follow``). For turns of other processes on the same store, one :class:`SessionWatch` per
followed session (shared by all its streams) reads two small things every :data:`POLL` seconds in a
small thread pool: the session record (``turns``, ``updated_at``) and the lease of the next turn
(renewed, with its events flushed, while another process runs it). When either changed, the streams
read the store again from their cursors; otherwise they read nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Generator
from concurrent.futures import ThreadPoolExecutor

from harness_run.events import AgentEvent
from harness_run.store import HistoryStore

__all__ = ["POLL", "SessionWatch", "Watches", "stored_after"]

log = logging.getLogger("harness_run.server")

POLL = 1.0
"""Seconds between a stream's keep-alives, and between reads of a followed session's record."""

WATCH_THREADS = 8
"""Threads reading followed sessions' records: with a slow store, many followed sessions are each
read less often rather than crowding the store calls of requests."""

WHOLE_LOG_TURNS = 4
"""A cursor more turns behind than this reads the whole log once rather than turn by turn."""

type Stamp = tuple[int, float, float | None]
"""(the record's ``turns``, its ``updated_at``, the next turn's lease ``renewed_at``)."""


class SessionWatch:
    """What wakes the streams of one session: :meth:`wake` (a turn started here) and a change of the
    session's stored :data:`Stamp` (:attr:`version` counts them), read every ``interval`` seconds
    while anyone follows the session."""

    def __init__(
        self, store: HistoryStore, session_id: str, pool: ThreadPoolExecutor, interval: float
    ) -> None:
        self.store = store
        self.session_id = session_id
        self.followers = 0
        self.version = 0
        """Bumped whenever the stored stamp changes (the first read included): re-read the store."""
        self.stamp: Stamp | None = None
        self._pool = pool
        self._interval = interval
        self._event = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    def wake(self) -> None:
        """Wake every stream of the session now."""
        event, self._event = self._event, asyncio.Event()
        event.set()

    async def wait(self, timeout: float) -> bool:
        """Until woken (True) or ``timeout`` seconds (False)."""
        event = self._event
        try:
            async with asyncio.timeout(timeout):
                await event.wait()
        except TimeoutError:
            return False
        return True

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(
                self._poll(), name=f"harness-run follow {self.session_id}"
            )

    def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            self._task = None

    async def _poll(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            try:
                stamp = await loop.run_in_executor(self._pool, self._read)
            except Exception as exc:  # the store hiccuped: keep the streams, look again later
                log.debug("reading session %s for its streams failed: %s", self.session_id, exc)
            else:
                if stamp != self.stamp:
                    self.stamp = stamp
                    self.version += 1
                    self.wake()
            await asyncio.sleep(self._interval)

    def _read(self) -> Stamp:
        record = self.store.get_session(self.session_id)
        if record is None:
            return (-1, 0.0, None)
        lease = self.store.get_turn_lease(self.session_id, record.turns + 1)
        return (record.turns, record.updated_at, lease.renewed_at if lease is not None else None)


class Watches:
    """The :class:`SessionWatch` of each followed session, made on the first follower and dropped
    with the last."""

    def __init__(self, store: HistoryStore, interval: float = POLL) -> None:
        self.store = store
        self.interval = interval
        self._watches: dict[str, SessionWatch] = {}
        self._pool = ThreadPoolExecutor(max_workers=WATCH_THREADS, thread_name_prefix="harness-run-follow")

    @contextlib.contextmanager
    def follow(self, session_id: str) -> Generator[SessionWatch]:
        """``with watches.follow(sid) as watch:`` while a stream follows the session."""
        watch = self._watches.get(session_id)
        if watch is None:
            watch = self._watches[session_id] = SessionWatch(
                self.store, session_id, self._pool, self.interval
            )
        watch.followers += 1
        watch.start()
        try:
            yield watch
        finally:
            watch.followers -= 1
            if watch.followers <= 0 and self._watches.get(session_id) is watch:
                watch.stop()
                del self._watches[session_id]

    def wake(self, session_id: str) -> None:
        """Wake the session's streams (a turn started here)."""
        watch = self._watches.get(session_id)
        if watch is not None:
            watch.wake()

    @property
    def followed(self) -> int:
        """How many sessions are followed now."""
        return len(self._watches)

    def close(self) -> None:
        for watch in self._watches.values():
            watch.stop()
        self._watches.clear()
        self._pool.shutdown(wait=False, cancel_futures=True)


def stored_after(
    store: HistoryStore, session_id: str, cursor: tuple[int, int], last_turn: int
) -> list[AgentEvent]:
    """The stored events after the ``(turn, seq)`` cursor up to turn ``last_turn``, in order; turn by
    turn (each read starts at the cursor) unless the cursor is far behind. Blocking."""
    turn, seq = cursor
    if last_turn < turn:
        return []
    if last_turn - turn > WHOLE_LOG_TURNS:
        events = store.read_events(session_id)
    else:
        events: list[AgentEvent] = []
        for number in range(turn, last_turn + 1):
            events.extend(store.read_events(session_id, number, after_seq=seq if number == turn else -1))
    return [e for e in events if (e.turn, e.seq) > cursor and e.turn <= last_turn]
