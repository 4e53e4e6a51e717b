"""The two history stores behind one test surface: open one, reach its raw storage to corrupt it."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

from harness_run.store import HistoryStore, open_store

# what -> (sqlite table, GCS object path under the prefix) of the record written by fill()
_TABLES = {"session": "sessions", "turn": "turns", "events": "events", "engine": "engines"}


class Backend:
    """One store location (a directory or a gs:// URL); ``open()`` gives a new client on it."""

    def __init__(self, kind: str, url: str) -> None:
        self.kind = kind
        self.url = url
        self.opened: list[HistoryStore] = []

    def open(self) -> HistoryStore:
        store = open_store(self.url)
        self.opened.append(store)
        return store

    def close(self) -> None:
        for store in self.opened:
            store.close()

    # --- raw access, for corruption tests -------------------------------------------------------

    def _object(self, what: str, key: str = "") -> str:
        names = {
            "session": "history/eng/sessions/s1/session.json",
            "turn": "history/eng/sessions/s1/turns/000001.json",
            "events": "history/eng/sessions/s1/events/000001/00000000.jsonl",
            "engine": "engines/eng/versions/v1.json",
            "blob": f"blobs/{key}",
        }
        return names[what]

    def _bucket(self) -> tuple[Any, str]:
        from google.cloud import storage

        bucket, _, prefix = self.url.removeprefix("gs://").partition("/")
        return storage.Client().bucket(bucket), prefix

    def write_raw(self, what: str, data: bytes, key: str = "") -> None:
        if self.kind == "sqlite":
            root = Path(self.url)
            if what == "blob":
                (root / "blobs" / key[:2] / key).write_bytes(data)
                return
            db = sqlite3.connect(root / "history.sqlite3")
            db.execute(f"UPDATE {_TABLES[what]} SET body = ?", (data.decode(),))
            db.commit()
            db.close()
        else:
            bucket, prefix = self._bucket()
            bucket.blob(f"{prefix}/{self._object(what, key)}").upload_from_string(data)

    def read_raw(self, what: str, key: str = "") -> list[bytes]:
        if self.kind == "sqlite":
            root = Path(self.url)
            if what == "blob":
                return [(root / "blobs" / key[:2] / key).read_bytes()]
            db = sqlite3.connect(root / "history.sqlite3")
            rows = [str(r[0]).encode() for r in db.execute(f"SELECT body FROM {_TABLES[what]}")]
            db.close()
            return rows
        bucket, prefix = self._bucket()
        return [bucket.blob(f"{prefix}/{self._object(what, key)}").download_as_bytes()]


def sqlite_url(tmp_path: Path) -> str:
    return str(tmp_path / "store")
