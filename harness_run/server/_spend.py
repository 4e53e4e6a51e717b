"""Spend per API key: what its sessions' turns cost in the key's budget period (UTC day or month).

Counted from the history itself (the turns of the sessions the key owns), so ``keys list`` offline
and the server agree and nothing new is stored. The server computes a key's figure once per period,
then adds each turn it runs as it ends.
"""

from __future__ import annotations

import calendar
import threading
import time
from typing import Literal

from harness_run.errors import PermissionDeniedError
from harness_run.store import ApiKeyRecord, HistoryStore

__all__ = ["KeySpend", "period_start", "spent_by"]


def period_start(per: Literal["day", "month"] | None, now: float | None = None) -> float | None:
    """When the current budget period began (UTC midnight of the day, or the 1st of the month)."""
    if per is None:
        return None
    t = time.gmtime(time.time() if now is None else now)
    day = 1 if per == "month" else t.tm_mday
    return float(calendar.timegm((t.tm_year, t.tm_mon, day, 0, 0, 0, 0, 0, 0)))


def spent_by(store: HistoryStore, key_id: str, since: float | None) -> float:
    """The cost of the turns started since ``since`` (None: ever) in the sessions ``key_id`` owns."""
    total = 0.0
    for session in store.list_sessions():
        if session.owner != key_id:
            continue
        for turn in store.list_turns(session.session_id):
            if since is not None and turn.started_at < since:
                continue
            if turn.result is not None and turn.result.cost_usd:
                total += turn.result.cost_usd
    return total


REFRESH_S = 60.0
"""A key's spend is re-read from the history at least this often (turns other servers ran)."""


class KeySpend:
    """The server's running figure per key and period. ``spent`` reads the store (call it off the
    event loop); a turn that starts reserves what it may spend (``hold``) until it ends
    (``settle``), so concurrent turns of one key cannot each take the whole remainder."""

    def __init__(self, store: HistoryStore) -> None:
        self._store = store
        self._lock = threading.Lock()
        self._seen: dict[str, tuple[float | None, float, float]] = {}  # key -> (period, spent, read at)
        self._held: dict[str, float] = {}  # key -> what its running turns may still spend

    def spent(self, record: ApiKeyRecord) -> float:
        start = period_start(record.budget_per)
        now = time.monotonic()
        with self._lock:
            hit = self._seen.get(record.key_id)
        if hit is not None and hit[0] == start and now - hit[2] < REFRESH_S:
            return hit[1]
        total = spent_by(self._store, record.key_id, start)
        with self._lock:
            self._seen[record.key_id] = (start, total, now)
        return total

    def remaining(self, record: ApiKeyRecord) -> float | None:
        """What the key may still spend this period, less what its running turns hold (None: no
        budget); a spent budget is refused (403) naming the key's budget and when it starts again."""
        if record.budget_usd is None:
            return None
        self.spent(record)
        with self._lock:
            return self._left(record)

    def _left(self, record: ApiKeyRecord) -> float:
        """(Under the lock, with a fresh figure seen.) The rest, or the 403."""
        budget = record.budget_usd or 0.0
        hit = self._seen.get(record.key_id)
        left = budget - (hit[1] if hit is not None else 0.0) - self._held.get(record.key_id, 0.0)
        if left <= 0:
            raise PermissionDeniedError(
                f"API key {record.key_id} has spent (or its running turns hold) its budget of "
                f"${budget:g} per {record.budget_per}; turns start again when they end, or next "
                f"{record.budget_per} (UTC)",
                field="budget_usd",
                allow="a key with a larger budget: harness-run serve keys create --budget-usd N",
            )
        return left

    def take(self, record: ApiKeyRecord, want: float | None) -> float | None:
        """Hold what a turn of the key may spend: ``want`` (its own budget; None: none), at most
        what is left — checked and held at once, so two turns starting together share the rest.
        None when the key has no budget; a spent budget raises as :meth:`remaining` does."""
        if record.budget_usd is None:
            return None
        self.spent(record)  # fresh enough figure (a store read, outside the lock)
        with self._lock:
            left = self._left(record)
            amount = left if want is None else min(want, left)
            self._held[record.key_id] = self._held.get(record.key_id, 0.0) + amount
        return amount

    def settle(self, key_id: str, held: float, started_at: float, cost: float | None) -> None:
        """That turn ended having spent ``cost``: its hold goes, its cost counts."""
        with self._lock:
            left = self._held.get(key_id, 0.0) - held
            if left > 1e-12:
                self._held[key_id] = left
            else:
                self._held.pop(key_id, None)
            hit = self._seen.get(key_id)
            if cost and hit is not None and (hit[0] is None or started_at >= hit[0]):
                self._seen[key_id] = (hit[0], hit[1] + cost, hit[2])
