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


class KeySpend:
    """The server's running figure per key and period. ``spent`` reads the store (call it off the
    event loop); ``add`` counts a turn that ended here."""

    def __init__(self, store: HistoryStore) -> None:
        self._store = store
        self._lock = threading.Lock()
        self._seen: dict[str, tuple[float | None, float]] = {}  # key id -> (period start, spent)

    def spent(self, record: ApiKeyRecord) -> float:
        start = period_start(record.budget_per)
        with self._lock:
            hit = self._seen.get(record.key_id)
        if hit is not None and hit[0] == start:
            return hit[1]
        total = spent_by(self._store, record.key_id, start)
        with self._lock:
            self._seen[record.key_id] = (start, total)
        return total

    def add(self, key_id: str, started_at: float, cost: float | None) -> None:
        if not cost:
            return
        with self._lock:
            hit = self._seen.get(key_id)
            if hit is not None and (hit[0] is None or started_at >= hit[0]):
                self._seen[key_id] = (hit[0], hit[1] + cost)

    def remaining(self, record: ApiKeyRecord) -> float | None:
        """What the key may still spend this period (None: no budget); a spent budget is refused
        (403) naming the key's budget and when the period ends."""
        if record.budget_usd is None:
            return None
        left = record.budget_usd - self.spent(record)
        if left <= 0:
            raise PermissionDeniedError(
                f"API key {record.key_id} has spent its budget of ${record.budget_usd:g} per "
                f"{record.budget_per}; turns start again next {record.budget_per} (UTC)",
                field="budget_usd",
                allow="a key with a larger budget: harness-run serve keys create --budget-usd N",
            )
        return left
