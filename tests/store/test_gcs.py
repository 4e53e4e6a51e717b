"""GCS history store specifics on fake-gcs-server: layout, races between processes, retries, faults."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from harness_run.errors import SessionBusyError, StoreError, UsageError
from harness_run.events import AgentEvent, MessageEvent
from harness_run.store import EngineRecord, GcsStore, SessionRecord, TurnRecord, open_store

from ._proxy import FaultProxy, Rule

pytestmark = pytest.mark.integration

RACE_PROC = Path(__file__).with_name("race_proc.py")


@pytest.fixture
def gcs(gcs_store_url: str) -> Iterator[GcsStore]:
    store = open_store(gcs_store_url)
    assert isinstance(store, GcsStore)
    yield store
    store.close()


def objects(store: GcsStore) -> dict[str, Any]:
    """name (under the prefix) -> blob, straight from the bucket."""
    from google.cloud import storage

    blobs = storage.Client().list_blobs(store.bucket_name, prefix=f"{store.prefix}/")
    return {b.name.removeprefix(f"{store.prefix}/"): b for b in blobs}


def record(sid: str = "s1", engine: str = "eng", turns: int = 0) -> SessionRecord:
    return SessionRecord(
        session_id=sid,
        engine=engine,
        version="v1",
        harness="claude-code",
        created_at=1.0,
        updated_at=1.0,
        turns=turns,
    )


def ev(seq: int, text: str = "") -> MessageEvent:
    return MessageEvent(turn=1, seq=seq, text=text or f"e{seq}")


def texts(events: list[AgentEvent]) -> list[str]:
    return [e.text for e in events if isinstance(e, MessageEvent)]


def test_the_bucket_layout_is_the_documented_one(gcs: GcsStore) -> None:
    gcs.put_engine(EngineRecord(name="eng", version="sha256-abc", spec={}, created_at=1.0))
    gcs.put_session(record())
    gcs.reserve_turn("s1", 1, "me")
    gcs.put_turn(TurnRecord(session_id="s1", turn=1, prompt="p", started_at=1.0))
    gcs.append_events("s1", 1, [ev(0), ev(1)])
    gcs.append_events("s1", 1, [ev(2)])
    key = gcs.for_engine("eng").put_blob(b"workspace tarball")  # an engine's runtime: its folder
    assert sorted(objects(gcs)) == [
        "engines/eng/versions/sha256-abc.json",
        f"history/eng/blobs/{key}",
        "history/eng/index/s1",
        "history/eng/sessions/s1/events/000001/00000000.jsonl",
        "history/eng/sessions/s1/events/000001/00000002.jsonl",
        "history/eng/sessions/s1/session.json",
        "history/eng/sessions/s1/turns/000001.json",
        "history/eng/sessions/s1/turns/000001.lock",
    ]
    lock = json.loads(objects(gcs)["history/eng/sessions/s1/turns/000001.lock"].download_as_bytes())
    assert lock["holder"] == "me"


def test_create_only_objects_are_never_rewritten(gcs: GcsStore) -> None:
    key = gcs.put_blob(b"snapshot")
    gcs.append_events("s1", 1, [ev(0), ev(1)])
    before = {name: blob.generation for name, blob in objects(gcs).items()}
    gcs.put_blob(b"snapshot")
    gcs.append_events("s1", 1, [ev(0, "other"), ev(1, "other")])
    with pytest.raises(SessionBusyError):
        gcs.reserve_turn("s1", 1, "a") or gcs.reserve_turn("s1", 1, "b")
    after = {name: blob.generation for name, blob in objects(gcs).items()}
    assert {n: g for n, g in after.items() if n in before} == before
    assert gcs.get_blob(key) == b"snapshot"
    assert texts(gcs.read_events("s1", 1)) == ["e0", "e1"]


def test_segments_survive_a_re_append_without_duplicates(gcs: GcsStore) -> None:
    gcs.append_events("s1", 1, [ev(i) for i in range(5)])
    gcs.append_events("s1", 1, [ev(i) for i in range(5)])  # a flush retried after a timeout
    gcs.append_events("s1", 1, [ev(i, "late copy") for i in range(10)])  # overlaps: only 5..9 are new
    gcs.append_events("s1", 1, [ev(i, "late copy") for i in range(3, 12)])
    names = sorted(n for n in objects(gcs) if "/events/" in n)
    assert names == [
        "sessions/s1/events/000001/00000000.jsonl",
        "sessions/s1/events/000001/00000003.jsonl",
        "sessions/s1/events/000001/00000005.jsonl",
    ]
    got = gcs.read_events("s1", 1)
    assert [e.seq for e in got] == list(range(12))
    assert texts(got)[:10] == [f"e{i}" for i in range(5)] + ["late copy"] * 5
    assert [e.seq for e in gcs.read_events("s1", 1, after_seq=9)] == [10, 11]
    assert [e.seq for e in gcs.read_events("s1", after_seq=10)] == [11]


def test_a_finished_turn_is_sealed_into_one_object_that_serves_reads(gcs_store_url: str) -> None:
    from google.cloud import storage

    from harness_run.events import RunResult

    writer = open_store(gcs_store_url)
    assert isinstance(writer, GcsStore)
    for i in range(5):  # five flushes while the turn runs
        writer.append_events("s1", 1, [ev(2 * i), ev(2 * i + 1)])
    writer.append_events("s1", 2, [ev(0)])
    started = TurnRecord(session_id="s1", turn=1, prompt="p", started_at=1.0)
    writer.put_turn(started)  # no result yet: nothing sealed
    writer.put_turn(started.model_copy(update={"result": RunResult(text="done")}))
    writer.put_turn(
        TurnRecord(session_id="s1", turn=2, prompt="p", started_at=2.0, result=RunResult(text="x"))
    )
    writer.close()  # waits for the background sealing
    names = sorted(n for n in objects(writer) if "/events/" in n)
    assert "sessions/s1/events/000001/sealed.jsonl" in names
    assert "sessions/s1/events/000002/sealed.jsonl" not in names  # one segment: nothing to merge
    assert len(names) == 7

    reader = open_store(gcs_store_url)
    assert [e.seq for e in reader.read_events("s1", 1)] == list(range(10))
    # the sealed object alone serves reads: with the segments gone, nothing is missing
    bucket = storage.Client().bucket(writer.bucket_name)
    for name in names:
        if "/000001/" in name and not name.endswith("sealed.jsonl"):
            bucket.blob(f"{writer.prefix}/{name}").delete()
    assert [e.seq for e in reader.read_events("s1", 1)] == list(range(10))
    assert [e.seq for e in reader.read_events("s1", 1, after_seq=7)] == [8, 9]
    assert [e.seq for e in reader.read_events("s1")] == [*range(10), 0]
    # events appended after sealing are still read
    reader.append_events("s1", 1, [ev(10)])
    assert [e.seq for e in reader.read_events("s1", 1)] == list(range(11))
    reader.close()


def _spawn(args: list[str]) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, str(RACE_PROC), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ},
    )


TURNS, BUMPS, PROCS = 10, 10, 2


@pytest.fixture(scope="module")
def raced(
    fake_gcs: Any, tmp_path_factory: pytest.TempPathFactory
) -> tuple[list[dict[str, Any]], SessionRecord]:
    """PROCS client processes, started together: each reserves turns 1..TURNS, then bumps s1 BUMPS times."""
    url = f"gs://{fake_gcs.create_bucket(f'hr-race-{os.getpid()}')}/hr"
    store = open_store(url)
    store.put_session(record(turns=0))
    go = tmp_path_factory.mktemp("race") / "go"
    children = [_spawn([url, str(go), f"proc-{i}", str(TURNS), str(BUMPS)]) for i in range(PROCS)]
    try:
        for child in children:  # every client is connected before the start line
            assert child.stdout is not None
            line = child.stdout.readline()
            assert "ready" in line, (line, child.stderr.read() if child.stderr else "")
        go.touch()
        results: list[dict[str, Any]] = []
        for child in children:
            out, err = child.communicate(timeout=120)
            assert child.returncode == 0, err
            results.append(json.loads(out.strip().splitlines()[-1]))
    finally:
        for child in children:
            if child.poll() is None:
                child.kill()
                child.wait()
    final = store.get_session("s1")
    store.close()
    assert final is not None
    return results, final


def test_processes_racing_for_the_same_turns_one_wins_each(
    raced: tuple[list[dict[str, Any]], SessionRecord],
) -> None:
    won = sorted(t for r in raced[0] for t in r["won"])
    assert won == list(range(1, TURNS + 1))  # every turn started exactly once, by one process


def test_cas_race_on_the_session_record_loses_no_update(
    raced: tuple[list[dict[str, Any]], SessionRecord],
) -> None:
    assert sum(r["bumped"] for r in raced[0]) == PROCS * BUMPS
    assert raced[1].turns == PROCS * BUMPS


@pytest.fixture
def proxy(fake_gcs: Any, monkeypatch: pytest.MonkeyPatch) -> Iterator[FaultProxy]:
    faulty = FaultProxy(fake_gcs.url)
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", faulty.url)
    yield faulty
    faulty.close()


def test_transient_errors_are_retried_and_lost_replies_do_not_double_writes(
    gcs_store_url: str, proxy: FaultProxy
) -> None:
    store = GcsStore(gcs_store_url.removeprefix("gs://").split("/")[0], "hr", retry_delay=0.02)
    proxy.rules += [
        Rule("POST", "/upload/", "before", times=2),  # the first two uploads fail outright
        Rule("GET", "/o", "before", times=1),
    ]
    store.put_session(record())
    assert store.get_session("s1") == record()

    # replies lost after the write happened: the retry meets its own write and must not double it
    proxy.rules.append(Rule("POST", "/upload/", "after", times=1))
    store.reserve_turn("s1", 1, "me")
    proxy.rules.append(Rule("POST", "/upload/", "after", times=1))
    store.append_events("s1", 1, [ev(0), ev(1)])
    proxy.rules.append(Rule("POST", "/upload/", "after", times=1))
    store.update_session("s1", lambda r: r.model_copy(update={"turns": r.turns + 1}))
    assert [e.seq for e in store.read_events("s1", 1)] == [0, 1]
    final = store.get_session("s1")
    assert final is not None and final.turns == 1
    with pytest.raises(SessionBusyError):
        store.reserve_turn("s1", 1, "someone else")
    assert len([i for i in proxy.injected if i.startswith("after")]) == 3
    assert len(proxy.injected) >= 6
    store.close()


def test_a_lost_reply_followed_by_another_writer_is_not_applied_twice(
    gcs_store_url: str, fake_gcs: Any, proxy: FaultProxy
) -> None:
    from google.cloud import storage

    bucket = gcs_store_url.removeprefix("gs://").split("/")[0]
    ours = GcsStore(bucket, "hr", retry_delay=0.02)  # through the proxy
    theirs = GcsStore(bucket, "hr", client=storage.Client(client_options={"api_endpoint": fake_gcs.url}))
    ours.put_session(record(turns=0))

    def bump(r: SessionRecord) -> SessionRecord:
        return r.model_copy(update={"turns": r.turns + 1})

    # our CAS write lands, then another client updates, then our reply is lost and the retry gets 412
    proxy.rules.append(Rule("POST", "/upload/", "after", then=lambda: theirs.update_session("s1", bump)))
    ours.update_session("s1", bump)
    final = theirs.get_session("s1")
    assert final is not None and final.turns == 2  # ours once + theirs once, not ours twice
    ours.close()
    theirs.close()


def test_a_missing_bucket_and_an_unreachable_server_give_clear_errors(
    fake_gcs: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    missing = GcsStore("no-such-bucket-here", "hr")
    with pytest.raises(StoreError, match="bucket gs://no-such-bucket-here does not exist"):
        missing.put_session(record())
    with pytest.raises(StoreError, match="bucket gs://no-such-bucket-here does not exist"):
        missing.get_session("s1")
    missing.close()

    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{sock.getsockname()[1]}"
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", dead)
    unreachable = GcsStore("bucket", retry_timeout=0.5, retry_delay=0.05)
    started = time.monotonic()
    with pytest.raises(
        StoreError, match=r"cannot read gs://bucket/sessions/s1/session.json.*reachable"
    ) as caught:
        unreachable.get_session("s1")
    assert caught.value.retryable
    assert time.monotonic() - started < 10
    unreachable.close()


def test_open_store_for_both_url_kinds(
    gcs_store_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)  # "relative-dir" below
    gcs = open_store(gcs_store_url)
    assert isinstance(gcs, GcsStore)
    assert gcs.url == gcs_store_url
    gcs.close()
    bare = open_store(gcs_store_url.removesuffix("/hr"))
    assert isinstance(bare, GcsStore) and bare.prefix == ""
    bare.close()
    from harness_run.store import SqliteStore

    for url in (str(tmp_path / "a"), f"file://{tmp_path / 'b'}", "relative-dir"):
        opened = open_store(url)
        assert isinstance(opened, SqliteStore)
        assert opened.url.startswith("file:///")
        again = open_store(opened.url)  # a store's url opens the same store
        assert isinstance(again, SqliteStore) and again.root.absolute() == opened.root.absolute()
        again.close()
        opened.close()
    assert (tmp_path / "a" / "history.sqlite3").exists()
    assert (tmp_path / "b" / "history.sqlite3").exists()
    assert (tmp_path / "relative-dir" / "history.sqlite3").exists()


@pytest.mark.parametrize(
    ("url", "says"),
    [
        ("", "URL is empty"),
        ("s3://bucket/x", "unsupported history store URL 's3://bucket/x'"),
        ("https://storage.googleapis.com/b", "unsupported"),
        ("gs://", "no valid bucket name"),
        ("gs://Upper_Case/x", "no valid bucket name"),
        ("file://otherhost/x", "remote host"),
        ("gs://bucket/x?y=1", "query"),
    ],
)
def test_open_store_rejects_a_bad_url_and_says_what_works(url: str, says: str) -> None:
    with pytest.raises(UsageError, match="gs://<bucket>") as caught:
        open_store(url)
    assert says in str(caught.value)


def test_names_that_cannot_be_object_names_are_refused(gcs: GcsStore) -> None:
    with pytest.raises(UsageError, match="session id 'a/b'"):
        gcs.get_session("a/b")
    with pytest.raises(UsageError, match=r"engine name '\.\.'"):
        gcs.put_engine(EngineRecord(name="..", version="v", spec={}))


def test_importing_the_store_package_does_not_import_google() -> None:
    code = (
        "import sys, harness_run.store\n"
        "from harness_run.store import GcsStore, open_store\n"
        "print(sorted(m for m in sys.modules if m.startswith('google')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_an_index_entry_without_its_session_is_skipped(gcs: GcsStore) -> None:
    """The index marker is written before the record: a client that died in between leaves only it."""
    from google.cloud import storage

    gcs.put_session(record("s1"))
    storage.Client().bucket(gcs.bucket_name).blob(f"{gcs.prefix}/index/eng/ghost").upload_from_string(b"")
    assert [s.session_id for s in gcs.list_sessions("eng")] == ["s1"]
    assert [s.session_id for s in gcs.list_sessions()] == ["s1"]


def test_a_corrupt_turn_reservation_is_reported_not_overwritten(gcs: GcsStore) -> None:
    from google.cloud import storage

    lock = storage.Client().bucket(gcs.bucket_name).blob(f"{gcs.prefix}/sessions/s1/turns/000001.lock")
    lock.upload_from_string(b"\x00garbage")
    with pytest.raises(StoreError, match=r"turns/000001.lock is corrupt; nothing was changed"):
        gcs.reserve_turn("s1", 1, "me")
    assert lock.download_as_bytes() == b"\x00garbage"
