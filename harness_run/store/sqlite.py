"""The default local history store: one SQLite file (WAL) plus content-addressed blob files.

No server; safe for several processes on one machine (SQLite locking, atomic blob renames).
"""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
import tempfile
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from harness_run.errors import StoreError
from harness_run.store._records import EngineRecord, SessionRecord, TurnRecord

__all__ = ["SqliteStore"]

_SCHEMA = """
CREATE TABLE IF NOT EXISTS engines (name TEXT, version TEXT, created_at REAL, body TEXT,
                                    PRIMARY KEY (name, version));
CREATE TABLE IF NOT EXISTS sessions (id TEXT PRIMARY KEY, engine TEXT, updated_at REAL, body TEXT);
CREATE INDEX IF NOT EXISTS sessions_engine ON sessions (engine, updated_at);
CREATE TABLE IF NOT EXISTS turns (session_id TEXT, turn INTEGER, body TEXT, PRIMARY KEY (session_id, turn));
CREATE TABLE IF NOT EXISTS events (session_id TEXT, turn INTEGER, seq INTEGER, body TEXT,
                                   PRIMARY KEY (session_id, turn, seq));
"""
_M = TypeVar("_M", bound=BaseModel)


class SqliteStore:
    """History in ``<root>/history.sqlite3`` and blobs in ``<root>/blobs/``."""

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)
        self._blobs = self.root / "blobs"
        self._lock = threading.Lock()
        try:
            self._blobs.mkdir(parents=True, exist_ok=True)
            self._db = sqlite3.connect(
                self.root / "history.sqlite3", timeout=30, check_same_thread=False, isolation_level=None
            )
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=NORMAL")
            self._db.executescript(_SCHEMA)
        except (OSError, sqlite3.Error) as exc:
            raise StoreError(
                f"cannot open the history store at {self.root}: {exc}; check the path and "
                "its permissions, or pass another workdir"
            ) from None

    # --- helpers ---------------------------------------------------------------------------------

    def _exec(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        try:
            with self._lock:
                return self._db.execute(sql, params).fetchall()
        except sqlite3.Error as exc:
            raise StoreError(
                f"history store error ({exc}); the database at {self.root} may be corrupt",
                retryable=isinstance(exc, sqlite3.OperationalError),
            ) from None

    def _load(self, model: type[_M], body: str, what: str) -> _M:
        try:
            return model.model_validate_json(body)
        except ValidationError as exc:
            raise StoreError(
                f"the stored {what} is corrupt ({exc.error_count()} problems, first: "
                f"{exc.errors()[0]['msg']}); it was not changed"
            ) from None

    # --- engines -------------------------------------------------------------------------------

    def put_engine(self, record: EngineRecord) -> None:
        self._exec(
            "INSERT OR REPLACE INTO engines VALUES (?, ?, ?, ?)",
            (record.name, record.version, record.created_at, record.model_dump_json()),
        )

    def get_engine(self, name: str, version: str | None = None) -> EngineRecord | None:
        if version is None:
            rows = self._exec(
                "SELECT body FROM engines WHERE name=? ORDER BY created_at DESC LIMIT 1", (name,)
            )
        else:
            rows = self._exec(
                "SELECT body FROM engines WHERE name=? AND version LIKE ? ORDER BY created_at DESC LIMIT 1",
                (name, f"{version}%"),
            )
        return self._load(EngineRecord, rows[0][0], f"engine {name}") if rows else None

    def list_engines(self, name: str | None = None) -> list[EngineRecord]:
        rows = (
            self._exec("SELECT body FROM engines WHERE name=? ORDER BY created_at", (name,))
            if name
            else self._exec("SELECT body FROM engines ORDER BY name, created_at")
        )
        return [self._load(EngineRecord, r[0], "engine") for r in rows]

    # --- sessions and turns -------------------------------------------------------------------

    def put_session(self, record: SessionRecord) -> None:
        self._exec(
            "INSERT OR REPLACE INTO sessions VALUES (?, ?, ?, ?)",
            (record.session_id, record.engine, record.updated_at, record.model_dump_json()),
        )

    def get_session(self, session_id: str) -> SessionRecord | None:
        rows = self._exec("SELECT body FROM sessions WHERE id=?", (session_id,))
        return self._load(SessionRecord, rows[0][0], f"session {session_id}") if rows else None

    def list_sessions(self, engine: str | None = None) -> list[SessionRecord]:
        rows = (
            self._exec("SELECT body FROM sessions WHERE engine=? ORDER BY updated_at", (engine,))
            if engine
            else self._exec("SELECT body FROM sessions ORDER BY updated_at")
        )
        return [self._load(SessionRecord, r[0], "session") for r in rows]

    def put_turn(self, record: TurnRecord) -> None:
        self._exec(
            "INSERT OR REPLACE INTO turns VALUES (?, ?, ?)",
            (record.session_id, record.turn, record.model_dump_json()),
        )

    def list_turns(self, session_id: str) -> list[TurnRecord]:
        rows = self._exec("SELECT body FROM turns WHERE session_id=? ORDER BY turn", (session_id,))
        return [self._load(TurnRecord, r[0], f"turn of session {session_id}") for r in rows]

    # --- events --------------------------------------------------------------------------------

    def append_events(self, session_id: str, turn: int, events: Sequence[dict[str, Any]]) -> None:
        if not events:
            return
        rows = [
            (session_id, turn, int(e.get("seq", i)), json.dumps(e, separators=(",", ":")))
            for i, e in enumerate(events)
        ]
        try:
            with self._lock:
                self._db.execute("BEGIN")
                self._db.executemany("INSERT OR REPLACE INTO events VALUES (?, ?, ?, ?)", rows)
                self._db.execute("COMMIT")
        except sqlite3.Error as exc:
            with self._lock:
                if self._db.in_transaction:
                    self._db.execute("ROLLBACK")
            raise StoreError(f"cannot append events to the history store: {exc}", retryable=True) from None

    def read_events(self, session_id: str, turn: int | None = None) -> list[dict[str, Any]]:
        if turn is None:
            rows = self._exec("SELECT body FROM events WHERE session_id=? ORDER BY turn, seq", (session_id,))
        else:
            rows = self._exec(
                "SELECT body FROM events WHERE session_id=? AND turn=? ORDER BY seq", (session_id, turn)
            )
        out: list[dict[str, Any]] = []
        for (body,) in rows:
            try:
                out.append(json.loads(body))
            except ValueError:
                raise StoreError(
                    f"a stored event of session {session_id} is corrupt; it was not changed"
                ) from None
        return out

    # --- blobs ---------------------------------------------------------------------------------

    def _blob_path(self, key: str) -> Path:
        if len(key) != 64 or any(c not in "0123456789abcdef" for c in key):
            raise StoreError(f"{key!r} is not a blob key")
        return self._blobs / key[:2] / key

    def put_blob(self, data: bytes) -> str:
        key = hashlib.sha256(data).hexdigest()
        path = self._blob_path(key)
        if path.exists():
            return key
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
        try:
            with os.fdopen(fd, "wb") as handle:
                handle.write(data)
            os.replace(tmp, path)
        except OSError as exc:
            Path(tmp).unlink(missing_ok=True)
            raise StoreError(f"cannot write a blob to {path.parent}: {exc}", retryable=True) from None
        return key

    def get_blob(self, key: str) -> bytes | None:
        path = self._blob_path(key)
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise StoreError(f"cannot read blob {key}: {exc}") from None
        if hashlib.sha256(data).hexdigest() != key:
            raise StoreError(f"blob {key} is corrupt (its content does not match its hash)")
        return data

    def close(self) -> None:
        with self._lock:
            self._db.close()
