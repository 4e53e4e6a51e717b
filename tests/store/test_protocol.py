"""Both history stores against the ``HistoryStore`` contract: SQLite files and GCS (fake-gcs-server)."""

from __future__ import annotations

import hashlib
import json
import threading
import time
from collections.abc import Callable, Sequence

import pytest
from test_events import EVENTS

from harness_run.errors import SessionBusyError, StoreError
from harness_run.events import AgentEvent, DeltaEvent, MessageEvent, RunResult, Usage, UserEvent
from harness_run.store import (
    EngineRecord,
    GcsStore,
    HistoryStore,
    SessionRecord,
    SnapshotRef,
    SqliteStore,
    TurnRecord,
)

from ._backends import Backend


def session_record(sid: str = "s1", engine: str = "eng", updated: float = 2.0) -> SessionRecord:
    result = RunResult(
        text="hi", cost_usd=0.25, usage=Usage(input_tokens=3, output_tokens=4), session_id=sid, turn=1
    )
    return SessionRecord(
        session_id=sid,
        engine=engine,
        version="v1",
        harness="claude-code",
        created_at=1.0,
        updated_at=updated,
        turns=1,
        config={"model": "claude-haiku-4-5"},
        last_result=result,
        snapshot=SnapshotRef(workspace="a" * 64, native=None, turn=1),
        native_started=True,
    )


def ev(turn: int, seq: int, text: str = "") -> MessageEvent:
    return MessageEvent(turn=turn, seq=seq, text=text or f"t{turn}e{seq}")


def texts(events: Sequence[AgentEvent]) -> list[str]:
    return [e.text for e in events if isinstance(e, MessageEvent | UserEvent)]


def test_both_stores_satisfy_the_protocol(store: HistoryStore) -> None:
    assert isinstance(store, (SqliteStore, GcsStore))
    typed: HistoryStore = store
    assert typed is store


def test_records_round_trip_and_another_client_sees_them(backend: Backend, store: HistoryStore) -> None:
    engine = EngineRecord(name="eng", version="v1", spec={"name": "eng", "model": "m"}, created_at=1.0)
    newer = EngineRecord(name="eng", version="v2", spec={"name": "eng", "model": "n"}, created_at=2.0)
    store.put_engine(engine)
    store.put_engine(newer)
    assert store.get_engine("eng") == newer  # the latest deployment
    assert store.get_engine("eng", "v1") == engine
    assert store.get_engine("nope") is None
    assert store.get_engine("eng", "v9") is None
    assert store.list_engines("eng") == [engine, newer]

    record = session_record()
    store.put_session(record)
    store.put_session(session_record("s2", updated=3.0))
    store.put_session(session_record("s3", engine="other"))
    assert store.get_session("s1") == record
    assert store.get_session("unknown") is None
    assert [s.session_id for s in store.list_sessions("eng")] == ["s1", "s2"]
    assert [s.session_id for s in store.list_sessions("other")] == ["s3"]
    assert store.list_sessions("none") == []
    assert len(store.list_sessions()) == 3

    turns = [
        TurnRecord(
            session_id="s1",
            turn=n,
            prompt=f"p{n}",
            started_at=float(n),
            settings={"model": "m"},
            secret_names=["A"],
            result=RunResult(text=f"r{n}"),
            steers=["s"],
        )
        for n in (2, 1)
    ]
    for turn in turns:
        store.put_turn(turn)
    assert store.list_turns("s1") == sorted(turns, key=lambda t: t.turn)
    assert store.list_turns("s2") == []

    # another client of the same store location (another process, another machine) sees all of it
    again = backend.open()
    assert again is not store
    assert again.get_session("s1") == record
    assert again.list_turns("s1") == store.list_turns("s1")
    assert again.list_engines() == [engine, newer]


def test_a_rewritten_session_replaces_the_old_one_and_is_listed_once(store: HistoryStore) -> None:
    store.put_session(session_record(updated=2.0))
    changed = session_record(updated=5.0).model_copy(update={"status": "running", "turns": 2})
    store.put_session(changed)
    assert store.get_session("s1") == changed
    assert store.list_sessions("eng") == [changed]
    turn = TurnRecord(session_id="s1", turn=1, prompt="p", started_at=1.0)
    store.put_turn(turn)
    done = turn.model_copy(update={"result": RunResult(text="done")})
    store.put_turn(done)
    assert store.list_turns("s1") == [done]


def test_delete_session_removes_its_records_events_and_reservations_and_blobs_go_one_by_one(
    store: HistoryStore,
) -> None:
    for sid in ("s1", "s2"):
        store.put_session(session_record(sid))
        store.put_turn(TurnRecord(session_id=sid, turn=1, prompt="p", started_at=1.0))
        store.append_events(sid, 1, [ev(1, 0), ev(1, 1)])
        store.reserve_turn(sid, 2, "holder")
    key = store.put_blob(b"snapshot")
    store.delete_session("s1")
    store.delete_session("s1")  # unknown by now: a no-op
    assert store.get_session("s1") is None and store.list_turns("s1") == [] and store.read_events("s1") == []
    assert [r.session_id for r in store.list_sessions("eng")] == ["s2"]
    store.reserve_turn("s1", 2, "another")  # its reservation went with it
    assert len(store.read_events("s2")) == 2 and store.get_blob(key) == b"snapshot"  # others untouched
    store.delete_blob(key)
    store.delete_blob(key)
    assert store.get_blob(key) is None


def test_engine_versions_by_prefix_listing_and_delete(store: HistoryStore) -> None:
    a1 = EngineRecord(name="a", version="sha256-111aaa", spec={}, created_at=1.0)
    a2 = EngineRecord(name="a", version="sha256-222bbb", spec={}, created_at=3.0)
    b1 = EngineRecord(name="b", version="sha256-333ccc", spec={}, created_at=2.0)
    for record in (a2, b1, a1):
        store.put_engine(record)
    assert store.get_engine("a", "sha256-111") == a1  # a version prefix is enough
    assert store.list_engines() == [a1, a2, b1]  # by name, then deployment time
    assert store.list_engines("a") == [a1, a2]

    store.delete_engine("a", "sha256-222bbb")
    assert store.get_engine("a") == a1
    assert store.list_engines("a") == [a1]
    store.delete_engine("a", "sha256-222bbb")  # already gone: nothing to do
    store.delete_engine("nope", "v1")
    store.delete_engine("a", "sha256-111aaa")
    assert store.get_engine("a") is None
    assert store.list_engines() == [b1]


def test_events_are_ordered_by_turn_and_seq_and_never_duplicated(store: HistoryStore) -> None:
    store.append_events("s1", 2, [ev(2, 1), ev(2, 0)])
    store.append_events("s1", 1, [ev(1, 1), ev(1, 0), ev(1, 2)])  # out of order within a batch
    store.append_events("s1", 1, [ev(1, 3), ev(1, 4)])
    store.append_events("s1", 1, [])  # nothing to do
    assert texts(store.read_events("s1", 1)) == ["t1e0", "t1e1", "t1e2", "t1e3", "t1e4"]
    assert texts(store.read_events("s1")) == ["t1e0", "t1e1", "t1e2", "t1e3", "t1e4", "t2e0", "t2e1"]

    # re-appending (a flush retried after a timeout, or a bigger batch that overlaps) never duplicates;
    # the first stored copy of an event wins
    store.append_events("s1", 1, [ev(1, 0, "again"), ev(1, 1, "again")])
    store.append_events("s1", 1, [ev(1, 3, "again"), ev(1, 4, "again"), ev(1, 5), ev(1, 6)])
    store.append_events("s1", 1, [ev(1, i, "again") for i in range(7)])
    assert texts(store.read_events("s1", 1)) == [f"t1e{i}" for i in range(7)]

    # resuming a stream from an offset
    assert texts(store.read_events("s1", 1, after_seq=4)) == ["t1e5", "t1e6"]
    assert store.read_events("s1", 1, after_seq=6) == []
    assert texts(store.read_events("s1", after_seq=0)) == [f"t1e{i}" for i in range(1, 7)] + ["t2e1"]
    assert store.read_events("s1", 3) == []
    assert store.read_events("unknown") == []


def test_every_event_type_comes_back_as_the_same_typed_event(backend: Backend, store: HistoryStore) -> None:
    stored = [e for e in EVENTS if e.type != "delta"]
    events = [e.model_copy(update={"seq": i, "turn": 1}) for i, e in enumerate(stored)]
    store.append_events("s1", 1, events[:4])
    store.append_events("s1", 1, events)
    assert store.read_events("s1", 1) == events  # typed fields, raw lines and all
    assert [type(e) for e in backend.open().read_events("s1")] == [type(e) for e in stored]


def test_text_deltas_are_never_stored_and_never_hide_an_event(store: HistoryStore) -> None:
    delta = DeltaEvent(seq=0, turn=1, text="stre", message_id="m")  # the seq of the event before it
    store.append_events("s1", 1, [delta, UserEvent(seq=0, turn=1, text="prompt"), delta])
    store.append_events("s1", 1, [DeltaEvent(seq=1, turn=1, text="am")])
    assert texts(store.read_events("s1", 1)) == ["prompt"]
    store.append_events("s1", 1, [MessageEvent(seq=1, turn=1, text="stream")])
    assert texts(store.read_events("s1")) == ["prompt", "stream"]


def test_events_are_keyed_by_their_seq_and_only_events_are_taken(store: HistoryStore) -> None:
    store.append_events("s1", 1, [UserEvent(seq=0, text="a"), UserEvent(seq=0, text="b")])
    assert texts(store.read_events("s1", 1)) == ["a"]  # the same seq twice: the first copy wins
    with pytest.raises(StoreError, match="event 0 is a dict, not an AgentEvent"):
        store.append_events("s1", 1, [{"type": "user", "seq": 1, "text": "c"}])  # type: ignore[list-item]
    assert texts(store.read_events("s1", 1)) == ["a"]


def test_blobs_are_content_addressed_and_checked(backend: Backend, store: HistoryStore) -> None:
    data = b"\x00snapshot bytes\xff" * 1000
    key = store.put_blob(data)
    assert key == hashlib.sha256(data).hexdigest()
    assert store.put_blob(data) == key  # idempotent
    assert store.get_blob(key) == data
    assert backend.open().get_blob(key) == data
    assert store.get_blob("0" * 64) is None
    assert store.put_blob(b"") == hashlib.sha256(b"").hexdigest()
    assert store.get_blob(hashlib.sha256(b"").hexdigest()) == b""
    with pytest.raises(StoreError, match="not a blob key"):
        store.get_blob("../../etc/passwd")

    backend.write_raw("blob", data[:-1] + b"!", key)  # bit rot
    with pytest.raises(StoreError, match=f"blob {key} is corrupt.*nothing was changed"):
        store.get_blob(key)
    assert backend.read_raw("blob", key) == [data[:-1] + b"!"]  # left as found


_READS: dict[str, Callable[[HistoryStore], object]] = {
    "session": lambda s: s.get_session("s1"),
    "session-list": lambda s: s.list_sessions("eng"),
    "turn": lambda s: s.list_turns("s1"),
    "events": lambda s: s.read_events("s1"),
    "engine": lambda s: s.get_engine("eng"),
}


_BAD_FIELDS = {  # a stored record that is JSON, but not a valid record: field -> a refused value
    "session": ("status", "paused"),
    "engine": ("runtime", "moon"),
    "turn": ("prompt", None),
}


@pytest.mark.parametrize("what", list(_BAD_FIELDS))
def test_a_record_with_a_bad_field_is_a_store_error_naming_record_and_field(
    backend: Backend, store: HistoryStore, what: str
) -> None:
    store.put_engine(EngineRecord(name="eng", version="v1", spec={}, created_at=1.0))
    store.put_session(session_record())
    store.put_turn(TurnRecord(session_id="s1", turn=1, prompt="p", started_at=1.0))
    field, value = _BAD_FIELDS[what]
    [stored] = backend.read_raw(what)
    broken = json.dumps({**json.loads(stored), field: value}).encode()
    backend.write_raw(what, broken)

    with pytest.raises(StoreError) as caught:
        _READS[what](store)
    message = str(caught.value)
    assert f"is corrupt ({field}: " in message
    assert ("s1" if what != "engine" else "eng") in message  # names the record …
    assert "nothing was changed" in message
    assert "pydantic" not in message and "Traceback" not in message  # … in our words
    assert backend.read_raw(what) == [broken]  # left as found


def test_a_stored_event_that_is_not_an_event_is_a_store_error(backend: Backend, store: HistoryStore) -> None:
    store.put_session(session_record())
    store.append_events("s1", 1, [ev(1, 0, "x")])
    bad = {"type": "message", "seq": 0}  # no text
    backend.write_raw(
        "events", json.dumps({"seq": 0, "event": bad} if backend.kind == "gcs" else bad).encode()
    )
    with pytest.raises(
        StoreError, match=r"event.* is corrupt \(message\.text: Field required\); nothing was changed"
    ):
        store.read_events("s1")


@pytest.mark.parametrize("what", list(_READS))
def test_a_corrupt_record_raises_a_clear_store_error_and_nothing_is_lost(
    backend: Backend, store: HistoryStore, what: str
) -> None:
    store.put_engine(EngineRecord(name="eng", version="v1", spec={}, created_at=1.0))
    store.put_session(session_record())
    store.put_session(session_record("s2"))
    store.put_turn(TurnRecord(session_id="s1", turn=1, prompt="p", started_at=1.0))
    store.append_events("s1", 1, [ev(1, 0, "x")])
    store.append_events("s2", 1, [ev(1, 0, "y")])
    kind = what.split("-")[0]
    garbage = b'{"truncated": '
    backend.write_raw(kind, garbage)

    with pytest.raises(StoreError, match="corrupt") as caught:
        _READS[what](store)
    message = str(caught.value)
    assert "nothing was changed" in message
    assert "Traceback" not in message
    assert backend.kind == "sqlite" or "gs://" in message  # names the object
    assert all(raw == garbage for raw in backend.read_raw(kind))  # left as found
    if backend.kind == "gcs":  # the other records are still there and readable
        assert texts(store.read_events("s2")) == ["y"]
        assert store.get_session("s2") is not None


def test_reserve_turn_has_one_winner_per_turn(store: HistoryStore) -> None:
    store.reserve_turn("s1", 1, "client-a")
    store.reserve_turn("s1", 1, "client-a")  # the holder may repeat it (a retried request)
    with pytest.raises(SessionBusyError) as caught:
        store.reserve_turn("s1", 1, "client-b")
    assert str(caught.value) == (
        "session s1 turn 1 was already started by another client; wait for it and re-attach with "
        "engine.get_session('s1')"
    )
    store.reserve_turn("s1", 2, "client-b")  # the next turn is free
    store.reserve_turn("s2", 1, "client-b")  # another session is independent


def test_turn_reservation_is_a_lease_its_holder_renews(backend: Backend, store: HistoryStore) -> None:
    assert store.get_turn_lease("s1", 1) is None
    before = time.time()
    store.reserve_turn("s1", 1, "client-a")
    lease = store.get_turn_lease("s1", 1)
    assert lease is not None
    assert (lease.session_id, lease.turn, lease.holder) == ("s1", 1, "client-a")
    assert before - 1 <= lease.renewed_at <= time.time() + 1
    time.sleep(0.02)
    store.renew_turn("s1", 1, "client-a")
    renewed = store.get_turn_lease("s1", 1)
    assert renewed is not None and renewed.holder == "client-a"
    assert renewed.renewed_at > lease.renewed_at  # the heartbeat moved the stamp on
    with pytest.raises(SessionBusyError):
        store.renew_turn("s1", 1, "client-b")  # only the holder renews: no take-over
    other = backend.open()  # another client reads the same lease
    assert other.get_turn_lease("s1", 1) == renewed
    other.renew_turn("s1", 2, "client-b")  # renewing a turn nobody reserved reserves it
    with pytest.raises(SessionBusyError):
        store.reserve_turn("s1", 2, "client-a")
    assert store.get_turn_lease("s2", 1) is None


def test_threads_racing_for_a_turn_one_wins(backend: Backend) -> None:
    stores = [backend.open() for _ in range(6)]
    for turn in (1, 2, 3):
        barrier = threading.Barrier(len(stores))
        outcome: dict[int, str] = {}

        def race(
            i: int,
            store: HistoryStore,
            turn: int = turn,
            barrier: threading.Barrier = barrier,
            outcome: dict[int, str] = outcome,
        ) -> None:
            barrier.wait()
            try:
                store.reserve_turn("s1", turn, f"client-{i}")
                outcome[i] = "won"
            except SessionBusyError:
                outcome[i] = "busy"

        threads = [threading.Thread(target=race, args=(i, s)) for i, s in enumerate(stores)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
        assert sorted(outcome.values()) == ["busy"] * (len(stores) - 1) + ["won"], outcome


def test_update_session_loses_no_concurrent_update(backend: Backend, store: HistoryStore) -> None:
    assert store.update_session("unknown", lambda r: r) is None
    store.put_session(session_record().model_copy(update={"turns": 0}))
    unchanged = store.update_session("s1", lambda r: None)
    assert unchanged == store.get_session("s1")

    def bump(record: SessionRecord) -> SessionRecord:
        return record.model_copy(update={"turns": record.turns + 1})

    stores = [backend.open() for _ in range(4)]
    per_thread = 5

    def work(s: HistoryStore) -> None:
        for _ in range(per_thread):
            s.update_session("s1", bump)

    threads = [threading.Thread(target=work, args=(s,)) for s in stores]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    final = store.get_session("s1")
    assert final is not None
    assert final.turns == len(stores) * per_thread
    assert store.update_session("s1", bump) == store.get_session("s1") == bump(final)


def test_api_keys_are_kept_by_id_and_another_client_sees_them(backend: Backend, store: HistoryStore) -> None:
    from harness_run.store import ApiKeyRecord

    assert isinstance(store, (SqliteStore, GcsStore))
    assert store.list_api_keys() == [] and store.get_api_key("0123abcd") is None
    first = ApiKeyRecord(key_id="0123abcd", name="alice", sha256="a" * 64, created_at=2.0)
    second = ApiKeyRecord(key_id="4567ef01", name="ci", sha256="b" * 64, created_at=1.0)
    store.put_api_key(first)
    store.put_api_key(second)
    other = backend.open()
    assert isinstance(other, (SqliteStore, GcsStore))
    assert other.list_api_keys() == [second, first]  # oldest first
    assert other.get_api_key("0123abcd") == first
    revoked = first.model_copy(update={"revoked_at": 3.0})
    other.put_api_key(revoked)
    assert store.get_api_key("0123abcd") == revoked
    assert [k.key_id for k in store.list_api_keys()] == ["4567ef01", "0123abcd"]
    for odd in ("", "../x", "a/b"):
        assert store.get_api_key(odd) is None
