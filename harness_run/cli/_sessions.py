"""``harness-run sessions`` and ``harness-run history ID``: read the local history store."""

from __future__ import annotations

import argparse
import json
import time
from typing import TYPE_CHECKING, Any

from harness_run.cli._options import add_workdir
from harness_run.errors import SessionNotFoundError

if TYPE_CHECKING:
    from harness_run.events import AgentEvent
    from harness_run.store import SqliteStore

__all__ = ["register"]


def register(sub: Any) -> None:
    sessions = sub.add_parser("sessions", help="list local sessions")
    sessions.add_argument("--engine", help="only sessions of this engine")
    sessions.add_argument("--json", action="store_true", help="print JSON")
    add_workdir(sessions)
    sessions.set_defaults(func=_sessions)

    history = sub.add_parser("history", help="show a session's turns and events")
    history.add_argument("session_id", metavar="ID")
    history.add_argument("--events", action="store_true", help="also show every event")
    history.add_argument("--json", action="store_true", help="print JSON")
    add_workdir(history)
    history.set_defaults(func=_history)


def _store(args: argparse.Namespace) -> SqliteStore:
    from harness_run.runtime.local import default_workdir
    from harness_run.store import SqliteStore

    return SqliteStore(args.workdir or default_workdir())


def _sessions(args: argparse.Namespace) -> int:
    store = _store(args)
    records = store.list_sessions(args.engine)
    if args.json:
        print(json.dumps([r.model_dump(mode="json", exclude={"last_result"}) for r in records], indent=2))
        return 0
    if not records:
        print('no sessions yet (run one with `harness-run run SPEC "prompt"` or `harness-run demo`)')
        return 0
    print(f"{'SESSION':36}  {'ENGINE':20}  {'TURNS':>5}  {'STATUS':8}  UPDATED")
    for r in records:
        updated = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(r.updated_at))
        print(f"{r.session_id:36}  {r.engine[:20]:20}  {r.turns:>5}  {r.status:8}  {updated}")
    return 0


def _history(args: argparse.Namespace) -> int:
    from harness_run.cli._view import EventView, format_result

    store = _store(args)
    record = store.get_session(args.session_id)
    if record is None:
        raise SessionNotFoundError(
            f"no session {args.session_id!r} in {store.root}; list them with `harness-run sessions`"
        )
    turns = store.list_turns(args.session_id)
    if args.json:
        events: list[AgentEvent] = store.read_events(args.session_id) if args.events else []
        print(
            json.dumps(
                {
                    "session": record.model_dump(mode="json"),
                    "turns": [t.model_dump(mode="json") for t in turns],
                    "events": [e.model_dump(mode="json") for e in events],
                },
                indent=2,
            )
        )
        return 0
    print(f"session {record.session_id}  engine {record.engine}@{record.version}  harness {record.harness}")
    view = EventView(as_json=False)
    for turn in turns:
        print(f"\n=== turn {turn.turn}: {turn.prompt}")
        config = json.dumps(turn.turn_config) if turn.turn_config else "-"
        print(f"    model {turn.settings.get('model')}  config {config}")
        if args.events:
            for event in store.read_events(args.session_id, turn.turn):
                view.event(event)
        if turn.result is not None:
            for key, value in format_result(turn.result):
                print(f"    {key}: {value}")
            if turn.result.text:
                print(f"    answer: {turn.result.text}")
    return 0
