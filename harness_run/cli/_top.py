"""``harness-run top``: a live table of sessions (status, turns, cost, last activity, resources),
read from a history store or a ``harness-run serve`` server; ``q`` or Ctrl-C quits."""

from __future__ import annotations

import argparse
import contextlib
import os
import select
import sys
import time
from collections.abc import Callable, Generator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from harness_run.cli._options import add_workdir
from harness_run.cli._text import safe
from harness_run.errors import UsageError

if TYPE_CHECKING:
    from rich.table import Table

    from harness_run.store import ApprovalRecord, SessionRecord, TurnRecord

__all__ = ["Row", "Sessions", "register", "rows"]

API_KEY_VARIABLE = "HARNESS_RUN_API_KEY"


def register(sub: Any) -> None:
    top = sub.add_parser("top", help="live view of sessions: status, turns, cost, resources")
    source = top.add_mutually_exclusive_group()
    source.add_argument(
        "--store", default=None, help="a history store: a directory or gs://BUCKET/PREFIX (default: workdir)"
    )
    source.add_argument("--server", metavar="URL", default=None, help="a harness-run serve server's URL")
    top.add_argument("--api-key", default=None, help=f"the server API key (default: ${API_KEY_VARIABLE})")
    top.add_argument("--engine", default=None, help="only sessions of this engine")
    top.add_argument("--once", action="store_true", help="print the table once and exit")
    top.add_argument("--interval", type=float, default=1.0, help="seconds between refreshes (default 1)")
    add_workdir(top)
    top.set_defaults(func=_top)


class Sessions(Protocol):
    """What ``top`` reads: a history store, or a server's sessions (``ServerHistory``)."""

    def list_sessions(self, engine: str | None = None) -> list[SessionRecord]: ...

    def list_turns(self, session_id: str) -> list[TurnRecord]: ...


@runtime_checkable
class _Approvals(Protocol):
    """A source that keeps approval requests (SQLite and GCS stores, a server)."""

    def list_approvals(self, session_id: str, *, pending: bool = False) -> list[ApprovalRecord]: ...


@dataclass(frozen=True, slots=True)
class Row:
    engine: str
    session_id: str
    status: str
    turns: int
    cost_usd: float | None
    updated_at: float
    cpu_seconds: float | None
    peak_memory_mb: float | None
    pending: int = 0
    """Tool calls or questions of its running turn waiting for a person's decision."""


def rows(store: Sessions, engine: str | None = None) -> list[Row]:
    """One row per session, the most recently active first; cost is the sum over its turns; its
    tool calls waiting for a person are counted."""
    out: list[Row] = []
    for record in store.list_sessions(engine):
        costs = [t.result.cost_usd for t in store.list_turns(record.session_id) if t.result]
        out.append(_row(record, costs, _pending(store, record)))
    return sorted(out, key=lambda r: r.updated_at, reverse=True)


def _pending(store: Sessions, record: SessionRecord) -> int:
    """The session's requests waiting for a decision now (a turn of any process: a local turn's
    session is not marked running in the store); expired ones are left out (their guard denies them)."""
    if not isinstance(store, _Approvals):
        return 0
    now = time.time()
    return sum(1 for a in store.list_approvals(record.session_id, pending=True) if a.expires_at > now)


def _row(record: SessionRecord, costs: list[float | None], pending: int = 0) -> Row:
    known = [c for c in costs if c is not None]
    last = record.last_result
    resources = last.resources if last is not None else None
    return Row(
        engine=record.engine,
        session_id=record.session_id,
        status=record.status,
        turns=record.turns,
        cost_usd=sum(known) if known else None,
        updated_at=record.updated_at,
        cpu_seconds=resources.cpu_seconds if resources else None,
        peak_memory_mb=resources.peak_memory_mb if resources else None,
        pending=pending,
    )


def _ago(stamp: float, now: float) -> str:
    seconds = max(0.0, now - stamp)
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{int(seconds // size)}{unit} ago"
    return f"{int(seconds)}s ago"


def table(found: list[Row], source: str) -> Table:
    """The rows as a table; what came from the store or the server is shown as plain text (no rich
    markup read in it, control characters removed)."""
    from rich.table import Table
    from rich.text import Text

    now = time.time()
    running = sum(1 for r in found if r.status == "running")
    total = sum(r.cost_usd or 0.0 for r in found)
    pending = sum(r.pending for r in found)
    view = Table(
        title=Text(f"harness-run top — {safe(source)}", style="table.title"),
        caption=f"{len(found)} sessions, {running} running, {pending} approvals pending, ${total:.4f} "
        "in all — q or Ctrl-C quits",
    )
    for name, justify in (
        ("ENGINE", "left"),
        ("SESSION", "left"),
        ("STATUS", "left"),
        ("TURNS", "right"),
        ("COST $", "right"),
        ("LAST ACTIVITY", "right"),
        ("CPU s", "right"),
        ("PEAK MB", "right"),
        ("APPROVALS", "right"),
    ):
        view.add_column(name, justify=justify)  # pyright: ignore[reportArgumentType]
    styles = {"running": "bold green", "failed": "red"}
    for r in found:
        view.add_row(
            Text(safe(r.engine)),
            Text(safe(r.session_id)),
            Text(safe(r.status), style=styles.get(r.status, "")),
            str(r.turns),
            "?" if r.cost_usd is None else f"{r.cost_usd:.4f}",
            _ago(r.updated_at, now),
            "-" if r.cpu_seconds is None else f"{r.cpu_seconds:.1f}",
            "-" if r.peak_memory_mb is None else f"{r.peak_memory_mb:.0f}",
            Text(f"{r.pending} pending", style="bold yellow") if r.pending else "-",
        )
    return view


def _open(args: argparse.Namespace, stack: contextlib.ExitStack) -> tuple[Sessions, str]:
    """What ``top`` reads and its name; a store opened here is closed with ``stack``."""
    if args.interval <= 0:
        raise UsageError(f"--interval must be a positive number of seconds, not {args.interval:g}")
    if args.server:
        from harness_run.runtime.server_client import ServerHistory, Wire

        key = args.api_key or os.environ.get(API_KEY_VARIABLE)
        if not key:
            raise UsageError(
                f"--server needs an API key: export {API_KEY_VARIABLE} (or pass --api-key) with a key from "
                "`harness-run serve keys create`"
            )
        return ServerHistory(Wire(args.server, key)), args.server
    from harness_run.store import open_store

    target = args.store
    if target is None:
        from harness_run.runtime.local import default_workdir

        target = str(args.workdir or default_workdir())
    if "://" not in target and not (Path(target).expanduser() / "history.sqlite3").is_file():
        raise UsageError(
            f"--store: no history store at {target} (no history.sqlite3 there); give the directory a "
            "`harness-run run`/`serve` used (--store or --workdir), or a gs:// URL"
        )
    store = open_store(str(Path(target).expanduser()) if "://" not in target else target)
    stack.callback(_quietly, store.close)
    return store, target


def _quietly(close: Callable[[], None]) -> None:
    with contextlib.suppress(Exception):
        close()


def _top(args: argparse.Namespace) -> int:
    with contextlib.ExitStack() as stack:
        store, source = _open(args, stack)
        if args.once:
            from rich.console import Console

            Console(width=max(140, _width())).print(table(rows(store, args.engine), source))
            return 0
        _live(lambda: table(rows(store, args.engine), source), args.interval)
        return 0


def _width() -> int:
    try:
        return os.get_terminal_size().columns
    except OSError:
        return 80


def _live(render: Callable[[], Table], interval: float) -> None:
    from rich.live import Live

    try:
        with _keys() as pressed, Live(render(), auto_refresh=False, screen=False) as live:
            while not {"q", "\x03"} & set(pressed(interval).lower()):  # q, or Ctrl-C read as a key
                live.update(render(), refresh=True)
    except KeyboardInterrupt:  # Ctrl-C: quitting is what the user asked for (exit 0)
        pass


@contextlib.contextmanager
def _keys() -> Generator[Callable[[float], str]]:
    """``pressed(timeout)``: the keys typed within ``timeout`` seconds (stdin in cbreak mode when it
    is a terminal; else nothing is read, only Ctrl-C stops)."""
    if not sys.stdin.isatty():

        def wait(timeout: float) -> str:
            time.sleep(timeout)
            return ""

        yield wait
        return
    import termios
    import tty

    fd = sys.stdin.fileno()
    saved = termios.tcgetattr(fd)
    tty.setcbreak(fd)

    def read(timeout: float) -> str:
        ready, _, _ = select.select([fd], [], [], timeout)
        return os.read(fd, 64).decode(errors="replace") if ready else ""

    try:
        yield read
    finally:
        termios.tcsetattr(fd, termios.TCSADRAIN, saved)
