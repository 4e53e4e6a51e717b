"""A damaged local store is a clear ``StoreError`` naming the file and the fix, never a silently
empty history: a truncated (0-byte) database next to stored blobs, a file that is not a database,
someone else's SQLite file, a dropped table. A failed open leaves no file descriptor behind, and a
new store is the owner's only (0700 directories, 0600 files)."""

from __future__ import annotations

import os
import sqlite3
import stat
from pathlib import Path

import pytest

from harness_run.errors import StoreError
from harness_run.store import SqliteStore


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_a_damaged_store_file_is_a_clear_error_and_leaks_nothing(tmp_path: Path) -> None:
    root = tmp_path / "store"
    store = SqliteStore(root)
    key = store.put_blob(b"a snapshot")
    store.close()
    db = root / "history.sqlite3"
    assert (mode(root), mode(root / "blobs"), mode(db)) == (0o700, 0o700, 0o600)
    blob = root / "blobs" / key[:2] / key
    assert (mode(blob.parent), mode(blob)) == (0o700, 0o600)

    for name in ("history.sqlite3-wal", "history.sqlite3-shm"):
        (root / name).unlink(missing_ok=True)
    db.write_bytes(b"")  # truncated
    with pytest.raises(StoreError, match=r"history\.sqlite3 is empty \(0 bytes\).*truncated.*backup"):
        SqliteStore(root)

    db.write_bytes(b"not a database at all, just text " * 100)
    before = open_fds()
    for _ in range(20):
        with pytest.raises(StoreError, match=r"history\.sqlite3 is not a readable harness-run history store"):
            SqliteStore(root)
    assert open_fds() == before  # every failed open closed what it opened

    db.unlink()
    with sqlite3.connect(db) as foreign:
        foreign.execute("CREATE TABLE photos (id INTEGER)")
    foreign.close()
    with pytest.raises(StoreError, match=r"not a harness-run history store.*photos"):
        SqliteStore(root)

    db.unlink()
    SqliteStore(root).close()
    with sqlite3.connect(db) as damaged:
        damaged.execute("DROP TABLE sessions")
    damaged.close()
    with pytest.raises(StoreError, match=r"lacks its tables \['sessions'\]"):
        SqliteStore(root)
