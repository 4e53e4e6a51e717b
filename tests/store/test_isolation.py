"""History isolation per engine on GCS (fake-gcs-server): each engine's folder, the old shared layout
still found, read, moved and deleted, and the worker's confined store refusing anything outside its
engine's folder (fake-gcs-server enforces no IAM, so the refusal is the store's own, before a request
is sent)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from testkit.old_layout import to_old_layout

from harness_run.errors import StoreError, UsageError
from harness_run.events import MessageEvent
from harness_run.store import EngineRecord, GcsStore, SessionRecord, SnapshotRef, TurnRecord, open_store

pytestmark = pytest.mark.integration


_OPENED: list[GcsStore] = []


def gcs(url: str, **kw: Any) -> GcsStore:
    store = open_store(url, **kw)
    assert isinstance(store, GcsStore)
    _OPENED.append(store)
    return store


@pytest.fixture
def url(gcs_store_url: str) -> Iterator[str]:
    """A fresh bucket; the stores the test opened on it are closed after it."""
    yield gcs_store_url
    while _OPENED:
        _OPENED.pop().close()


def names(store: GcsStore) -> list[str]:
    from google.cloud import storage

    blobs = storage.Client().list_blobs(store.bucket_name, prefix=f"{store.prefix}/")
    return sorted(b.name.removeprefix(f"{store.prefix}/") for b in blobs)


def session(sid: str, engine: str, snapshot: str | None = None) -> SessionRecord:
    return SessionRecord(
        session_id=sid,
        engine=engine,
        version="v1",
        harness="claude-code",
        created_at=1.0,
        updated_at=1.0,
        turns=1,
        snapshot=SnapshotRef(workspace=snapshot, native=None, turn=1) if snapshot else None,
    )


def write_session(store: GcsStore, sid: str, engine: str, blob: bytes) -> str:
    """A session with a finished turn, events and a snapshot, as an engine's runtime writes it."""
    view = store.for_engine(engine)
    key = view.put_blob(blob)
    view.put_session(session(sid, engine, key))
    view.reserve_turn(sid, 1, "client")
    view.put_turn(TurnRecord(session_id=sid, turn=1, prompt=f"prompt {sid}", started_at=1.0))
    view.append_events(sid, 1, [MessageEvent(turn=1, seq=0, text=f"said in {sid}")])
    view.append_events(sid, 1, [MessageEvent(turn=1, seq=1, text=f"more in {sid}")])
    return key


def test_two_engines_in_one_bucket_each_see_only_their_own_sessions(url: str) -> None:
    admin = gcs(url)
    key_a = write_session(admin, "sa", "alpha", b"alpha workspace")
    key_b = write_session(admin, "sb", "beta", b"beta workspace")
    admin.put_engine(EngineRecord(name="alpha", version="v1", spec={}, created_at=1.0))
    assert [n for n in names(admin) if n.startswith("history/")] == [
        f"history/alpha/blobs/{key_a}",
        "history/alpha/index/sa",
        "history/alpha/sessions/sa/events/000001/00000000.jsonl",
        "history/alpha/sessions/sa/events/000001/00000001.jsonl",
        "history/alpha/sessions/sa/session.json",
        "history/alpha/sessions/sa/turns/000001.json",
        "history/alpha/sessions/sa/turns/000001.lock",
        f"history/beta/blobs/{key_b}",
        "history/beta/index/sb",
        "history/beta/sessions/sb/events/000001/00000000.jsonl",
        "history/beta/sessions/sb/events/000001/00000001.jsonl",
        "history/beta/sessions/sb/session.json",
        "history/beta/sessions/sb/turns/000001.json",
        "history/beta/sessions/sb/turns/000001.lock",
    ]
    # the server and the CLI (no engine): every engine's sessions, each found by id
    fresh = gcs(url)
    assert [s.session_id for s in fresh.list_sessions()] == ["sa", "sb"]
    assert [s.session_id for s in fresh.list_sessions("beta")] == ["sb"]
    assert [e.text for e in fresh.read_events("sb") if isinstance(e, MessageEvent)] == [
        "said in sb",
        "more in sb",
    ]

    # the worker of engine alpha: its own sessions and blobs, nothing of beta's
    alpha = gcs(url, engine="alpha", confined=True)
    assert [s.session_id for s in alpha.list_sessions()] == ["sa"]
    assert alpha.get_session("sa") is not None and alpha.get_blob(key_a) == b"alpha workspace"
    assert alpha.get_session("sb") is None  # looked up in alpha's folder only
    assert alpha.read_events("sb") == [] and alpha.list_turns("sb") == []
    assert alpha.get_blob(key_b) is None
    for call, what in [
        (lambda: alpha.list_sessions("beta"), "list"),
        (lambda: alpha.get_engine("alpha"), "list"),
        (lambda: alpha.get_engine("alpha", "v1"), "read"),
        (alpha.list_api_keys, "list"),
    ]:
        with pytest.raises(StoreError) as caught:
            call()
        message = str(caught.value)
        assert f"cannot {what} gs://" in message and "confined to engine 'alpha'" in message
        assert "/history/alpha/ (the sandbox's identity reaches only its own engine's sessions)" in message
    with pytest.raises(UsageError, match="engine 'alpha''s view; a record of engine 'beta'"):
        alpha.put_session(session("sx", "beta"))
    with pytest.raises(UsageError, match="confined=True\\) needs engine="):
        gcs(url, confined=True)


def test_a_session_of_the_old_layout_is_found_read_moved_on_write_and_deleted(url: str) -> None:
    admin = gcs(url)
    key = write_session(admin, "old", "alpha", b"old workspace")
    write_session(admin, "new", "alpha", b"new workspace")
    to_old_layout(admin, "alpha", "old", key)
    before = names(admin)
    assert "sessions/old/session.json" in before and "index/alpha/old" in before and f"blobs/{key}" in before

    reader = gcs(url)  # found and read where it is: reading moves nothing
    assert [s.session_id for s in reader.list_sessions()] == ["new", "old"]
    assert [s.session_id for s in reader.list_sessions("alpha")] == ["new", "old"]
    got = reader.get_session("old")
    assert got is not None and got.snapshot is not None and got.snapshot.workspace == key
    assert [t.prompt for t in reader.list_turns("old")] == ["prompt old"]
    assert len(reader.read_events("old")) == 2
    view = reader.for_engine("alpha")  # an engine's runtime reads it too, and its snapshot
    assert view.get_blob(key) == b"old workspace"
    assert [s.session_id for s in view.list_sessions()] == ["new", "old"]
    assert names(reader) == before
    # a confined worker cannot reach the old layout at all: its client moves the session first
    assert gcs(url, engine="alpha", confined=True).get_session("old") is None

    # resuming: the client reserves turn 2 -> the session moves into alpha's folder, then is written
    view.reserve_turn("old", 2, "client")
    view.append_events("old", 2, [MessageEvent(turn=2, seq=2, text="turn two")])
    after = names(reader)
    assert not [n for n in after if n.startswith(("sessions/", "index/"))]  # nothing left behind
    assert f"history/alpha/blobs/{key}" in after and "history/alpha/index/old" in after
    worker = gcs(url, engine="alpha", confined=True)
    moved = worker.get_session("old")
    assert moved is not None and moved.model_dump() == got.model_dump()
    assert worker.get_blob(key) == b"old workspace"  # the snapshot came along: the worker restores it
    assert [e.seq for e in worker.read_events("old")] == [0, 1, 2]
    assert [t.prompt for t in worker.list_turns("old")] == ["prompt old"]
    lease = worker.get_turn_lease("old", 2)
    assert lease is not None and lease.holder == "client"

    gcs(url).delete_session("old")  # deleted from everywhere
    assert not [n for n in names(reader) if "/old" in n]
    assert [s.session_id for s in gcs(url).list_sessions()] == ["new"]


def test_a_move_interrupted_at_any_point_is_finished_by_the_next_write(url: str) -> None:
    """The move copies (create-only) everything but the record, then the record, then deletes the
    old objects. A crash before the record copy leaves partial copies; after it, leftovers."""
    from google.cloud import storage

    admin = gcs(url)
    to_old_layout(admin, "alpha", "s1", write_session(admin, "s1", "alpha", b"ws one"))
    to_old_layout(admin, "alpha", "s2", write_session(admin, "s2", "alpha", b"ws two"))
    client = storage.Client()
    bucket = client.bucket(admin.bucket_name)
    p = admin.prefix

    def copy(rest: str) -> None:
        bucket.copy_blob(bucket.blob(f"{p}/{rest}"), bucket, f"{p}/history/alpha/{rest}")

    # s1: crashed after copying one event segment, before the record
    copy("sessions/s1/events/000001/00000000.jsonl")
    # s2: crashed after copying everything and the record, before deleting the old objects
    for blob in list(client.list_blobs(bucket, prefix=f"{p}/sessions/s2/")):
        copy(blob.name.removeprefix(f"{p}/"))

    reader = gcs(url)
    assert [s.session_id for s in reader.list_sessions()] == ["s1", "s2"]  # listed once each
    assert [e.seq for e in reader.read_events("s2")] == [0, 1]  # from the moved copy

    view = gcs(url).for_engine("alpha")
    view.append_events("s1", 2, [MessageEvent(turn=2, seq=2, text="after")])
    assert [e.seq for e in view.read_events("s1")] == [0, 1, 2]  # no event lost or doubled
    assert not [n for n in names(reader) if n.startswith("sessions/s1/") or n == "index/alpha/s1"]
    view.delete_session("s2")  # the leftovers of the old layout go with it
    assert not [n for n in names(reader) if "s2" in n]
    assert [s.session_id for s in gcs(url).list_sessions()] == ["s1"]
