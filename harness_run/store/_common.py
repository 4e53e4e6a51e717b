"""Pieces every history store shares: key checks, the session-busy error, event ordering."""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from typing import Any

from harness_run.errors import SessionBusyError, StoreError

__all__ = ["busy_error", "check_blob_key", "event_rows", "merge_events"]

_BLOB_KEY = re.compile(r"[0-9a-f]{64}")


def check_blob_key(key: str) -> str:
    if not _BLOB_KEY.fullmatch(key):
        raise StoreError(f"{key!r} is not a blob key (a sha256 hex digest, as put_blob returns)")
    return key


def busy_error(session_id: str, turn: int) -> SessionBusyError:
    return SessionBusyError(
        f"session {session_id} turn {turn} was already started by another client; wait for it and "
        f"re-attach with engine.get_session({session_id!r})"
    )


def event_rows(events: Sequence[dict[str, Any]]) -> list[tuple[int, dict[str, Any]]]:
    """``(seq, event)`` pairs, sorted by seq, first copy of each seq kept (no ``seq``: its index)."""
    seen: dict[int, dict[str, Any]] = {}
    for index, event in enumerate(events):
        seq = event.get("seq", index)
        if not isinstance(seq, int) or isinstance(seq, bool):
            raise StoreError(f"event {index} has a non-integer seq {seq!r}; events need an integer seq")
        seen.setdefault(seq, event)
    return sorted(seen.items(), key=lambda item: item[0])


def merge_events(
    rows: Iterable[tuple[int, int, dict[str, Any]]], after_seq: int = -1
) -> list[dict[str, Any]]:
    """Events from ``(turn, seq, event)`` rows ordered by (turn, seq): first copy wins, seq > after_seq."""
    seen: dict[tuple[int, int], dict[str, Any]] = {}
    for turn, seq, event in rows:
        if seq > after_seq:
            seen.setdefault((turn, seq), event)
    return [seen[key] for key in sorted(seen)]
