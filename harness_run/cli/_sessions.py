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
    actions = sessions.add_subparsers(dest="action", metavar="{prune}")
    prune = actions.add_parser("prune", help="list (and with --yes remove) idle local workspaces")
    prune.add_argument(
        "--older-than",
        help="idle for at least this long: 90s, 30m, 12h, 7d (default: $HARNESS_RUN_WORKSPACE_TTL, else 7d)",
    )
    prune.add_argument("--history", action="store_true", help="also delete their sessions' history")
    prune.add_argument("--yes", action="store_true", help="remove them (without it: only list them)")
    add_workdir(prune)
    prune.set_defaults(func=_prune)

    history = sub.add_parser("history", help="show a session's turns and events")
    history.add_argument("session_id", metavar="ID")
    history.add_argument("--events", action="store_true", help="also show every event")
    history.add_argument("--json", action="store_true", help="print the stored records as JSON")
    history.add_argument(
        "--format",
        choices=["text", "md", "json"],
        default="text",
        help="md/json: the conversation as a transcript (Markdown, or portable JSON)",
    )
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


def _prune(args: argparse.Namespace) -> int:
    from harness_run.runtime.local import idle_workspaces, parse_age, prune_workspaces, workspace_ttl

    if args.older_than is not None:
        older_than, text = parse_age(args.older_than), args.older_than
    else:
        older_than, text = workspace_ttl()
    store = _store(args)
    found = idle_workspaces(store.root, store, older_than)
    if not found:
        print(f"no local workspace idle for {text} or more in {store.root}")
        return 0
    verb = "removing" if args.yes else "would remove"
    for entry in found:
        engine = entry.record.engine if entry.record else "(no history)"
        print(f"{verb} {entry.session_id}  {engine[:20]:20}  idle {entry.idle_s / 3600:.1f}h  {entry.path}")
    if args.yes:
        prune_workspaces(store, found, history=args.history)
        what = "workspaces and history" if args.history else "workspaces"
        print(f"removed {len(found)} {what}")
    else:
        print("dry run: add --yes to remove them")
    return 0


def _history(args: argparse.Namespace) -> int:
    from harness_run.cli._text import json_line, safe
    from harness_run.cli._view import EventView, format_result

    store = _store(args)
    record = store.get_session(args.session_id)
    if record is None:
        raise SessionNotFoundError(
            f"no session {args.session_id!r} in {store.root}; list them with `harness-run sessions`"
        )
    if args.format != "text":
        from harness_run.runtime import load_transcript

        transcript = load_transcript(store, record)
        shown = (
            transcript.to_markdown() if args.format == "md" else json.dumps(transcript.to_json(), indent=2)
        )
        print(safe(shown) if args.format == "md" else json_line(shown))
        return 0
    turns = store.list_turns(args.session_id)
    if args.json:
        events: list[AgentEvent] = store.read_events(args.session_id) if args.events else []
        document = {
            "session": record.model_dump(mode="json"),
            "turns": [t.model_dump(mode="json") for t in turns],
            "events": [e.model_dump(mode="json") for e in events],
        }
        print(json_line(json.dumps(document, indent=2)))
        return 0
    print(f"session {record.session_id}  engine {record.engine}@{record.version}  harness {record.harness}")
    view = EventView(as_json=False)
    for turn in turns:
        print(safe(f"\n=== turn {turn.turn}: {turn.prompt}"))
        config = json.dumps(turn.turn_config) if turn.turn_config else "-"
        print(safe(f"    model {turn.settings.get('model')}  config {config}"))
        if args.events:
            for event in store.read_events(args.session_id, turn.turn):
                view.event(event)
        if turn.result is not None:
            for key, value in format_result(turn.result):
                print(safe(f"    {key}: {value}"))
            if turn.result.text:
                print(safe(f"    answer: {turn.result.text}"))
    return 0
