"""A round trip of the GCS history store against a real bucket (run by test_gcs_live.py).

python live_check.py gs://bucket/prefix
"""

from __future__ import annotations

import hashlib
import sys
import uuid

from harness_run.errors import SessionBusyError
from harness_run.events import UserEvent
from harness_run.store import EngineRecord, GcsStore, SessionRecord, open_store


def main() -> None:
    url = f"{sys.argv[1].rstrip('/')}/live-{uuid.uuid4().hex[:12]}"
    store = open_store(url)
    assert isinstance(store, GcsStore)
    engine = EngineRecord(name="live", version="v1", spec={}, created_at=1.0)
    store.put_engine(engine)
    assert store.get_engine("live") == engine
    record = SessionRecord(
        session_id="s1", engine="live", version="v1", harness="claude-code", created_at=1.0, updated_at=1.0
    )
    store.put_session(record)
    assert store.get_session("s1") == record
    assert [s.session_id for s in store.list_sessions("live")] == ["s1"]
    bumped = store.update_session("s1", lambda r: r.model_copy(update={"turns": r.turns + 1}))
    assert bumped is not None and bumped.turns == 1
    store.reserve_turn("s1", 1, "a")
    try:
        store.reserve_turn("s1", 1, "b")
        raise AssertionError("a second holder got the same turn")
    except SessionBusyError:
        pass
    events = [UserEvent(seq=i, text=f"e{i}") for i in range(5)]
    store.append_events("s1", 1, events[:3])
    store.append_events("s1", 1, events)
    assert store.read_events("s1", 1) == events
    assert [e.seq for e in store.read_events("s1", 1, after_seq=2)] == [3, 4]
    key = store.put_blob(b"live blob")
    assert key == hashlib.sha256(b"live blob").hexdigest() and store.get_blob(key) == b"live blob"
    store.delete_engine("live", "v1")
    assert store.get_engine("live") is None
    store.close()
    print(f"ok {url}")


if __name__ == "__main__":
    main()
