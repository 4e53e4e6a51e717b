"""Turn leases of the local runtime: who runs a session's turn, and whether they are still alive.

A turn is reserved in the history store before its process starts (``reserve_turn``: one winner
across every process). While it runs, its owner renews the reservation every ``period`` seconds
(``renew_turn``) and writes the turn's new events to the store, so a re-attaching process sees the
turn so far. A lease not renewed for ``HARNESS_RUN_TURN_LEASE`` seconds (default 15) means the
owner is gone; so does, on the same machine, a holder whose process no longer exists (the holder
names host, pid and the pid's start time) — found at once, with no wait for the lease to expire.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import time
import uuid
from collections.abc import Callable, Collection

from harness_run.errors import HarnessRunError, UsageError
from harness_run.events import ResultEvent, RunResult, StartedEvent, UserEvent
from harness_run.runtime._approvals import orphaned_decisions
from harness_run.runtime._run import Run
from harness_run.store import HistoryStore, SessionRecord, TurnLease, TurnRecord

__all__ = ["LEASE_ENV", "LeaseKeeper", "finish_orphan", "lease_seconds", "new_holder", "owner_gone"]

LEASE_ENV = "HARNESS_RUN_TURN_LEASE"
DEFAULT_LEASE = 15.0
_log = logging.getLogger("harness_run.runtime")


def lease_seconds() -> float:
    """How long a turn's lease lasts without renewal (``$HARNESS_RUN_TURN_LEASE``, default 15 s)."""
    raw = os.environ.get(LEASE_ENV, "").strip()
    if not raw:
        return DEFAULT_LEASE
    try:
        value = float(raw)
    except ValueError:
        value = 0.0
    if not value >= 1.0:  # also refuses nan
        raise UsageError(
            f"{LEASE_ENV}={raw!r} is not a number of seconds >= 1; set it to e.g. 15 or unset it"
        )
    return value


def _start_time(pid: int) -> str | None:
    """The start time of process ``pid`` (clock ticks since boot), None when it does not exist."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            fields = handle.read().decode(errors="replace").rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    if len(fields) < 20 or fields[0] == "Z":
        return None
    return fields[19]


def new_holder() -> str:
    """A unique holder for one turn: ``host:pid:start:random``."""
    return f"{socket.gethostname()}:{os.getpid()}:{_start_time(os.getpid()) or '-'}:{uuid.uuid4().hex[:12]}"


def owner_gone(lease: TurnLease, ttl: float, now: float | None = None) -> bool:
    """True when the lease expired, or its holder is a process of this machine that has ended."""
    if (now if now is not None else time.time()) - lease.renewed_at > ttl:
        return True
    parts = lease.holder.split(":")
    if len(parts) != 4 or parts[0] != socket.gethostname() or not parts[1].isdigit() or parts[2] == "-":
        return False
    if not os.path.isdir("/proc/self"):
        return False  # no way to look: wait for the lease to expire
    return _start_time(int(parts[1])) != parts[2]


class LeaseKeeper:
    """Renews a running turn's lease and flushes its new events (all but the result) to the store."""

    def __init__(self, store: HistoryStore, run: Run, holder: str, period: float) -> None:
        self._store = store
        self._run = run
        self._holder = holder
        self._period = period
        self._task: asyncio.Task[None] | None = None
        self._nudged = asyncio.Event()

    def nudge(self) -> None:
        """Flush now rather than at the next period (the harness's session id has just arrived)."""
        self._nudged.set()

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._loop(), name="harness-run turn lease")

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    async def _loop(self) -> None:
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._nudged.wait(), self._period)
            self._nudged.clear()
            try:
                await asyncio.to_thread(self.beat)
            except HarnessRunError as exc:  # the store hiccuped: try again next period
                _log.warning(
                    "turn %s of session %s: lease renewal failed: %s",
                    self._run.turn,
                    self._run.session_id,
                    exc,
                )

    def beat(self) -> None:
        run = self._run
        self._store.renew_turn(run.session_id, run.turn, self._holder)
        events = run.events
        end = len(events) - (1 if events and events[-1].type == "result" else 0)
        start = run.flushed
        if end > start:
            self._store.append_events(run.session_id, run.turn, events[start:end])
            run.flushed = max(run.flushed, end)


_ENDED = (
    "the process running this turn ended before the turn did (killed or crashed); the turn "
    "was stopped with it — send the next message to go on"
)


def _orphan_result(store: HistoryStore, record: SessionRecord, lease: TurnLease, why: str) -> RunResult:
    """Store the end of a turn whose owner died: its result event and turn record (interrupted)."""
    sid, turn = record.session_id, lease.turn
    done = next((t for t in store.list_turns(sid) if t.turn == turn), None)
    if done is not None and done.result is not None:  # the owner died while storing the turn
        return done.result
    events = store.read_events(sid, turn)
    users = [e for e in events if isinstance(e, UserEvent)]
    native = next((e.native_session_id for e in events if isinstance(e, StartedEvent)), None)
    result = RunResult(
        stop_reason="interrupted",
        error=why,
        session_id=sid,
        turn=turn,
        harness=record.harness,
        native_session_id=native,
    )
    seq = max((e.seq for e in events), default=-1) + 1
    denied = orphaned_decisions(store, sid, turn, seq)  # calls left waiting for a person: denied
    ended = ResultEvent(result=result, seq=seq + len(denied), turn=turn, ts=time.time())
    store.append_events(sid, turn, [*denied, ended])
    started = users[0].ts if users else lease.renewed_at
    prompt = users[0].text if users else ""
    steers = [e.text for e in users[1:]]
    store.put_turn(
        TurnRecord(session_id=sid, turn=turn, prompt=prompt, started_at=started, result=result, steers=steers)
    )
    return result


def finish_orphan(
    store: HistoryStore,
    session_id: str,
    *,
    ttl: float,
    own: Collection[str],
    native_exists: Callable[[str | None], bool],
    gone: Callable[[TurnLease], bool] | None = None,
    why: str = _ENDED,
) -> SessionRecord | None:
    """Finish the session's next turn when it is reserved by an owner that is gone (see
    :func:`owner_gone`, or ``gone(lease)`` when given and true; holders in ``own`` are this process's
    running turns): its result and turn record are stored (``interrupted``, the error ``why``) and
    the session moves past it. ``native_exists(native id)`` tells whether the harness's native
    session is on disk, so the next turn resumes it. Returns the session record after that, or None
    when there was nothing to finish."""
    record = store.get_session(session_id)
    if record is None:
        return None
    turn = record.turns + 1
    lease = store.get_turn_lease(session_id, turn)
    if lease is None or lease.holder in own:
        return None
    if not owner_gone(lease, ttl) and (gone is None or not gone(lease)):
        return None
    result = _orphan_result(store, record, lease, why)
    native_id = result.native_session_id or record.native_session_id
    started = record.native_started or native_exists(native_id)

    def update(current: SessionRecord) -> SessionRecord | None:
        if current.turns >= turn:  # finished meanwhile (by its owner, or another re-attaching client)
            return None
        return current.model_copy(
            update={
                "turns": turn,
                "updated_at": time.time(),
                "status": "failed" if result.is_error else "idle",
                "last_result": result,
                "stop_reason": result.stop_reason,
                "native_started": started,
                "native_session_id": native_id,
            }
        )

    _log.warning(
        "session %s: turn %d was left by a process that is gone; stored it as interrupted", session_id, turn
    )
    return store.update_session(session_id, update)
