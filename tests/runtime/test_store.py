"""``SqliteStore`` against the ``HistoryStore`` contract (no harness needed)."""

from __future__ import annotations

import hashlib
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest

from harness_run.errors import StoreError
from harness_run.events import RunResult, Usage
from harness_run.store import EngineRecord, HistoryStore, SessionRecord, SnapshotRef, SqliteStore, TurnRecord


@pytest.fixture
def store(tmp_path: Path) -> Iterator[SqliteStore]:
    opened = SqliteStore(tmp_path / "store")
    yield opened
    opened.close()


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


def test_sqlite_store_satisfies_the_protocol(store: SqliteStore) -> None:
    typed: HistoryStore = store
    assert typed is store


def test_records_round_trip(store: SqliteStore, tmp_path: Path) -> None:
    engine = EngineRecord(name="eng", version="v1", spec={"name": "eng", "model": "m"}, created_at=1.0)
    newer = EngineRecord(name="eng", version="v2", spec={"name": "eng", "model": "n"}, created_at=2.0)
    store.put_engine(engine)
    store.put_engine(newer)
    assert store.get_engine("eng") == newer  # the latest deployment
    assert store.get_engine("eng", "v1") == engine
    assert store.get_engine("nope") is None
    assert store.list_engines("eng") == [engine, newer]

    record = session_record()
    store.put_session(record)
    store.put_session(session_record("s2", updated=3.0))
    store.put_session(session_record("s3", engine="other"))
    assert store.get_session("s1") == record
    assert store.get_session("unknown") is None
    assert [s.session_id for s in store.list_sessions("eng")] == ["s1", "s2"]
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

    events = [{"type": "user", "seq": i, "turn": 1, "text": f"e{i}"} for i in (1, 0, 2)]
    store.append_events("s1", 1, events)
    store.append_events("s1", 2, [{"type": "user", "seq": 0, "turn": 2, "text": "t2"}])
    assert [e["text"] for e in store.read_events("s1", 1)] == ["e0", "e1", "e2"]
    assert [e["text"] for e in store.read_events("s1")] == ["e0", "e1", "e2", "t2"]

    # another store object on the same directory (another process) sees the same history
    again = SqliteStore(tmp_path / "store")
    try:
        assert again.get_session("s1") == record
        assert again.list_turns("s1") == store.list_turns("s1")
    finally:
        again.close()


def test_blobs_are_content_addressed_and_checked(store: SqliteStore) -> None:
    data = b"\x00snapshot bytes\xff" * 1000
    key = store.put_blob(data)
    assert key == hashlib.sha256(data).hexdigest()
    assert store.put_blob(data) == key  # idempotent
    assert store.get_blob(key) == data
    assert store.get_blob("0" * 64) is None
    with pytest.raises(StoreError, match="not a blob key"):
        store.get_blob("../../etc/passwd")

    path = store.root / "blobs" / key[:2] / key
    path.write_bytes(data[:-1] + b"!")  # bit rot
    with pytest.raises(StoreError, match=f"blob {key} is corrupt"):
        store.get_blob(key)
    assert path.read_bytes() == data[:-1] + b"!"  # left as found


@pytest.mark.parametrize(
    ("table", "read"),
    [
        ("sessions", lambda s: s.get_session("s1")),
        ("sessions", lambda s: s.list_sessions("eng")),
        ("turns", lambda s: s.list_turns("s1")),
        ("events", lambda s: s.read_events("s1")),
        ("engines", lambda s: s.get_engine("eng")),
    ],
)
def test_a_corrupt_record_raises_a_clear_store_error_and_stays_untouched(
    store: SqliteStore,
    table: str,
    read: object,
) -> None:
    store.put_engine(EngineRecord(name="eng", version="v1", spec={}, created_at=1.0))
    store.put_session(session_record())
    store.put_turn(TurnRecord(session_id="s1", turn=1, prompt="p", started_at=1.0))
    store.append_events("s1", 1, [{"type": "user", "seq": 0, "turn": 1, "text": "x"}])
    db = sqlite3.connect(store.root / "history.sqlite3")
    db.execute(f"UPDATE {table} SET body = ?", ('{"truncated": ',))
    db.commit()

    with pytest.raises(StoreError, match="corrupt") as caught:
        read(store)  # type: ignore[operator]
    assert "Traceback" not in str(caught.value)
    assert [row[0] for row in db.execute(f"SELECT body FROM {table}")] == ['{"truncated": ']
    db.close()
