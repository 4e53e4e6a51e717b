"""Pieces every history store shares: key checks, the session-busy error, event ordering, and
reading stored JSON back into typed records and events (a corrupt one is a clear ``StoreError``)."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from pydantic import BaseModel, ValidationError

from harness_run.errors import SessionBusyError, StoreError
from harness_run.events import EVENT_TYPES, AgentEvent, parse_event

__all__ = [
    "busy_error",
    "check_blob_key",
    "corrupt",
    "event_rows",
    "load_event",
    "load_record",
    "merge_events",
]

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


def corrupt(what: str, fix: str, problem: ValidationError | str | None = None) -> StoreError:
    """The error for stored data that cannot be read back: names it, says what is wrong with it
    (the first field pydantic refused), that nothing was changed, and what to do."""
    if isinstance(problem, ValidationError):
        first = problem.errors(include_url=False)[0]
        field = ".".join(str(part) for part in first["loc"])
        more = problem.error_count() - 1
        problem = (f"{field}: " if field else "") + first["msg"] + (f" (and {more} more)" if more else "")
    detail = f" ({problem})" if problem else ""
    return StoreError(f"{what} is corrupt{detail}; nothing was changed — {fix}")


def load_record[M: BaseModel](model: type[M], data: str | bytes, what: str, fix: str) -> M:
    """A record from its stored JSON; :func:`corrupt` when it is not one."""
    try:
        return model.model_validate_json(data)
    except ValidationError as exc:
        raise corrupt(what, fix, exc) from None


def load_event(data: Mapping[str, Any] | str | bytes, what: str, fix: str) -> AgentEvent:
    """An event from its stored form (``event.model_dump_json()``, as text or parsed);
    :func:`corrupt` when it is not one."""
    try:
        return parse_event(data)
    except ValidationError as exc:
        raise corrupt(what, fix, exc) from None


def event_rows(events: Sequence[AgentEvent]) -> list[tuple[int, AgentEvent]]:
    """``(seq, event)`` pairs, sorted by seq, the first copy of each seq kept. Text deltas are left
    out: they are live only, and share the seq of the stored event before them (storing one would
    hide that event)."""
    seen: dict[int, AgentEvent] = {}
    for index, event in enumerate(events):
        if not isinstance(event, EVENT_TYPES):  # pyright: ignore[reportUnnecessaryIsInstance]
            raise StoreError(
                f"event {index} is a {type(event).__name__}, not an AgentEvent; pass the events "
                "themselves (harness_run.events; parse_event() turns a dict into one)"
            )
        if event.type != "delta":
            seen.setdefault(event.seq, event)
    return sorted(seen.items(), key=lambda item: item[0])


def merge_events(rows: Iterable[tuple[int, int, AgentEvent]], after_seq: int = -1) -> list[AgentEvent]:
    """Events from ``(turn, seq, event)`` rows ordered by (turn, seq): first copy wins, seq > after_seq."""
    seen: dict[tuple[int, int], AgentEvent] = {}
    for turn, seq, event in rows:
        if seq > after_seq:
            seen.setdefault((turn, seq), event)
    return [seen[key] for key in sorted(seen)]
