"""What the per-engine history folders cost on GCS: requests and time of the lookups they add.

On fake-gcs-server (127.0.0.1, in memory), so times show the store's own work plus a loopback round
trip per request; the request counts are what carries over to real GCS (multiply by its latency,
~20-50 ms a request from a GKE pod). ENGINES engines with SESSIONS sessions each (TURNS turns, two
event segments per turn), plus SESSIONS sessions of engine e0 in the old shared layout. Prints:

  find_new_ms/_requests       a store without an engine (server, CLI) finding a session of the new
                              layout by id, first time in the process (old-layout read, listing, a
                              read per engine)
  find_old_ms/_requests       the same for a session of the old layout (one read)
  first_touch_view_ms/_requests    an engine's runtime reading the events of a session it has not
                              touched yet (one lookup: is the record in the engine's folder?)
  first_touch_worker_ms/_requests  the worker's confined store doing the same (no lookup at all)
  list_all_ms/_requests       list_sessions() across every engine and the old layout
  move_ms/_requests           the first write to an old-layout session: moving it

    python -m benchmarks history_layout [--engines 5] [--sessions 20] [--turns 3] [--smoke]
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from typing import Any

from benchmarks._common import testkit
from benchmarks._services import fake_gcs
from harness_run.events import MessageEvent
from harness_run.store import GcsStore, SessionRecord, SnapshotRef, TurnRecord


def counted(store: GcsStore) -> list[int]:
    """Count the store's requests (every one goes through ``_call``)."""
    calls = [0]
    inner: Callable[..., Any] = store._call  # pyright: ignore[reportPrivateUsage]

    def call(what: str, fn: Callable[[], Any]) -> Any:
        calls[0] += 1
        return inner(what, fn)

    store._call = call  # type: ignore[method-assign]  # pyright: ignore[reportPrivateUsage]
    return calls


def fill(store: GcsStore, engine: str, sid: str, turns: int) -> list[str]:
    view = store.for_engine(engine)
    key = view.put_blob(f"workspace of {sid}".encode())
    view.put_session(
        SessionRecord(
            session_id=sid, engine=engine, version="v1", harness="claude-code", created_at=1.0,
            updated_at=1.0, turns=turns, snapshot=SnapshotRef(workspace=key, native=None, turn=turns),
        )
    )  # fmt: skip
    for turn in range(1, turns + 1):
        view.reserve_turn(sid, turn, "bench")
        view.append_events(sid, turn, [MessageEvent(turn=turn, seq=2 * turn, text="a")])
        view.append_events(sid, turn, [MessageEvent(turn=turn, seq=2 * turn + 1, text="b")])
        view.put_turn(TurnRecord(session_id=sid, turn=turn, prompt="p", started_at=1.0))
    return [key]


def measure(url_bucket: str, label: str, fn: Callable[[GcsStore], object], **kw: Any) -> None:
    """``fn`` on a fresh store (nothing remembered), 3 times: median time, most requests."""
    times: list[float] = []
    requests: list[int] = []
    for _ in range(3):
        store = GcsStore(url_bucket, "hr", **kw)
        calls = counted(store)
        started = time.perf_counter()
        fn(store)
        times.append(time.perf_counter() - started)
        requests.append(calls[0])
        store.close()
    print(f"{label}_ms {statistics.median(times) * 1000:.1f}")
    print(f"{label}_requests {max(requests)}")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--engines", type=int, default=5)
    parser.add_argument("--sessions", type=int, default=20)
    parser.add_argument("--turns", type=int, default=3)
    parser.add_argument("--smoke", action="store_true", help="2 engines, 2 sessions, 1 turn")
    args = parser.parse_args()
    if args.smoke:
        args.engines, args.sessions, args.turns = 2, 2, 1
    to_old_layout = testkit("old_layout").to_old_layout
    with fake_gcs() as gcs:
        bucket = gcs.create_bucket("bench-history")
        setup = GcsStore(bucket, "hr")
        for e in range(args.engines):
            for s in range(args.sessions):
                fill(setup, f"e{e}", f"e{e}-s{s}", args.turns)
        for s in range(args.sessions):
            keys = fill(setup, "e0", f"old-{s}", args.turns)
            to_old_layout(setup, "e0", f"old-{s}", *keys)
        print(f"engines {args.engines}  sessions per engine {args.sessions}  turns {args.turns}")
        last = f"e{args.engines - 1}-s0"
        measure(bucket, "find_new", lambda s: s.get_session(last))
        measure(bucket, "find_old", lambda s: s.get_session("old-0"))
        measure(bucket, "first_touch_view", lambda s: s.read_events("e0-s0"), engine="e0")
        measure(bucket, "first_touch_worker", lambda s: s.read_events("e0-s0"), engine="e0", confined=True)
        measure(bucket, "list_all", lambda s: s.list_sessions())
        moves: list[float] = []
        requests: list[int] = []
        for s in range(min(3, args.sessions)):
            store = GcsStore(bucket, "hr", engine="e0")
            calls = counted(store)
            started = time.perf_counter()
            store.reserve_turn(f"old-{s}", args.turns + 1, "bench")
            moves.append(time.perf_counter() - started)
            requests.append(calls[0])
            store.close()
        print(f"move_ms {statistics.median(moves) * 1000:.1f}")
        print(f"move_requests {max(requests)}")
        setup.close()


if __name__ == "__main__":
    main()
