"""The default local history store: one SQLite file (WAL) plus content-addressed blob files.

No server; safe for several processes on one machine (SQLite locking, atomic blob renames).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import sqlite3
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel

from harness_run.errors import StoreError
from harness_run.events import AgentEvent
from harness_run.store._approvals import ApprovalDecision, ApprovalRecord, DecidedBy, decided, not_found
from harness_run.store._common import (
    busy_error,
    check_blob_key,
    corrupt,
    event_rows,
    load_event,
    load_record,
    merge_events,
)
from harness_run.store._protocol import SessionUpdate
from harness_run.store._records import ApiKeyRecord, EngineRecord, SessionRecord, TurnLease, TurnRecord

__all__ = ["SqliteStore"]

_SCHEMA = """
CREATE TABLE IF NOT EXISTS engines (name TEXT, version TEXT, created_at REAL, body TEXT,
                                    PRIMARY KEY (name, version));
CREATE TABLE IF NOT EXISTS sessions (id TEXT PRIMARY KEY, engine TEXT, updated_at REAL, body TEXT);
CREATE INDEX IF NOT EXISTS sessions_engine ON sessions (engine, updated_at);
CREATE TABLE IF NOT EXISTS turns (session_id TEXT, turn INTEGER, body TEXT, PRIMARY KEY (session_id, turn));
CREATE TABLE IF NOT EXISTS events (session_id TEXT, turn INTEGER, seq INTEGER, body TEXT,
                                   PRIMARY KEY (session_id, turn, seq));
CREATE TABLE IF NOT EXISTS turn_locks (session_id TEXT, turn INTEGER, holder TEXT, at REAL,
                                       PRIMARY KEY (session_id, turn));
CREATE TABLE IF NOT EXISTS api_keys (key_id TEXT PRIMARY KEY, created_at REAL, body TEXT);
CREATE TABLE IF NOT EXISTS approvals (session_id TEXT, request_id TEXT, pending INTEGER, created_at REAL,
                                      body TEXT, PRIMARY KEY (session_id, request_id));
"""
_CORE_TABLES = frozenset({"engines", "sessions", "turns", "events"})
_M = TypeVar("_M", bound=BaseModel)


def _tables(db: sqlite3.Connection) -> set[str]:
    return {str(r[0]) for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")}


def _check_tables(path: Path, existing: set[str]) -> None:
    """An existing database must be ours and whole: a foreign file or a dropped table is an error,
    never silently recreated empty (tables added by later versions are created as usual)."""
    if not existing:
        return
    missing = sorted(_CORE_TABLES - existing)
    if missing == sorted(_CORE_TABLES):
        raise StoreError(
            f"{path} is an SQLite database but not a harness-run history store (its tables: "
            f"{sorted(existing)}); pass another workdir, or move that file away"
        )
    if missing:
        raise StoreError(
            f"the history store {path} lacks its tables {missing} (dropped or damaged); restore the "
            "file from a backup, or move it away to start a new store"
        )


def _check_not_truncated(path: Path, blobs: Path) -> None:
    """A 0-byte database next to stored blobs was truncated: refuse it rather than read it as empty."""
    try:
        if path.stat().st_size:
            return
    except FileNotFoundError:
        return
    wal = path.with_name(path.name + "-wal")
    if wal.exists() and wal.stat().st_size:
        return
    if next((p for p in blobs.rglob("*") if p.is_file()), None) is not None:
        raise StoreError(
            f"the history store {path} is empty (0 bytes) but {blobs} holds stored snapshots: the "
            "file was truncated; restore it from a backup, or move it away to start a new store"
        )


_T = TypeVar("_T")


class SqliteStore:
    """History in ``<root>/history.sqlite3`` and blobs in ``<root>/blobs/``."""

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)
        self._blobs = self.root / "blobs"
        self._lock = threading.Lock()
        path = self.root / "history.sqlite3"
        db: sqlite3.Connection | None = None
        try:
            self.root.mkdir(mode=0o700, parents=True, exist_ok=True)  # new dirs: the owner's only
            self._blobs.mkdir(mode=0o700, exist_ok=True)
            _check_not_truncated(path, self._blobs)
            new = not path.exists()
            db = sqlite3.connect(path, timeout=30, check_same_thread=False, isolation_level=None)
            if new:  # the owner's only (its -wal/-shm inherit the mode): prompts, transcripts
                path.chmod(0o600)
            existing = _tables(db)
            db.execute("PRAGMA journal_mode=WAL")
            db.execute("PRAGMA synchronous=NORMAL")
            _check_tables(path, existing)
            db.executescript(_SCHEMA)
            self._db = db
        except StoreError:
            if db is not None:
                db.close()
            raise
        except sqlite3.DatabaseError as exc:
            if db is not None:
                db.close()  # no file descriptor left behind by a failed open
            raise StoreError(
                f"{path} is not a readable harness-run history store ({exc}); move it away to start a "
                "new store there, restore it from a backup, or pass another workdir"
            ) from None
        except (OSError, sqlite3.Error) as exc:
            if db is not None:
                db.close()
            raise StoreError(
                f"cannot open the history store at {self.root}: {exc}; check the path and "
                "its permissions, or pass another workdir"
            ) from None

    def __repr__(self) -> str:
        return f"SqliteStore({str(self.root)!r})"

    @property
    def url(self) -> str:
        """``file://`` URL of the store directory (what :func:`open_store` accepts)."""
        return self.root.absolute().as_uri()

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

    def _transaction(self, work: Callable[[sqlite3.Connection], _T], what: str) -> _T:
        """Run ``work`` inside BEGIN IMMEDIATE (the write lock across processes), commit or roll back."""
        with self._lock:
            try:
                self._db.execute("BEGIN IMMEDIATE")
                try:
                    out = work(self._db)
                except BaseException:
                    self._db.execute("ROLLBACK")
                    raise
                self._db.execute("COMMIT")
                return out
            except sqlite3.Error as exc:
                if self._db.in_transaction:
                    self._db.execute("ROLLBACK")
                raise StoreError(
                    f"cannot {what} in the history store at {self.root}: {exc}",
                    retryable=isinstance(exc, sqlite3.OperationalError),
                ) from None

    def _where(self, what: str) -> str:
        return f"the stored {what} (in {self.root / 'history.sqlite3'})"

    def _fix(self) -> str:
        return f"restore {self.root / 'history.sqlite3'} from a backup, or delete that record"

    def _load(self, model: type[_M], body: str, what: str) -> _M:
        return load_record(model, body, self._where(what), self._fix())

    # --- engines -------------------------------------------------------------------------------

    def put_engine(self, record: EngineRecord) -> None:
        self._exec(
            "INSERT OR REPLACE INTO engines VALUES (?, ?, ?, ?)",
            (record.name, record.version, record.created_at, record.model_dump_json()),
        )

    def get_engine(self, name: str, version: str | None = None) -> EngineRecord | None:
        if version is None:
            rows = self._exec(
                "SELECT version, body FROM engines WHERE name=? ORDER BY created_at DESC LIMIT 1", (name,)
            )
        else:
            rows = self._exec(
                "SELECT version, body FROM engines WHERE name=? AND version LIKE ? "
                "ORDER BY created_at DESC LIMIT 1",
                (name, f"{version}%"),
            )
        if not rows:
            return None
        return self._load(EngineRecord, rows[0][1], f"engine {name} version {rows[0][0]}")

    def list_engines(self, name: str | None = None) -> list[EngineRecord]:
        rows = (
            self._exec("SELECT name, version, body FROM engines WHERE name=? ORDER BY created_at", (name,))
            if name
            else self._exec("SELECT name, version, body FROM engines ORDER BY name, created_at")
        )
        return [self._load(EngineRecord, body, f"engine {n} version {v}") for n, v, body in rows]

    def delete_engine(self, name: str, version: str) -> None:
        self._exec("DELETE FROM engines WHERE name=? AND version=?", (name, version))

    # --- sessions and turns -------------------------------------------------------------------

    def put_session(self, record: SessionRecord) -> None:
        self._exec(
            "INSERT OR REPLACE INTO sessions VALUES (?, ?, ?, ?)",
            (record.session_id, record.engine, record.updated_at, record.model_dump_json()),
        )

    def get_session(self, session_id: str) -> SessionRecord | None:
        rows = self._exec("SELECT body FROM sessions WHERE id=?", (session_id,))
        return self._load(SessionRecord, rows[0][0], f"session {session_id}") if rows else None

    def update_session(self, session_id: str, update: SessionUpdate) -> SessionRecord | None:
        def work(db: sqlite3.Connection) -> SessionRecord | None:
            rows = db.execute("SELECT body FROM sessions WHERE id=?", (session_id,)).fetchall()
            if not rows:
                return None
            current = self._load(SessionRecord, rows[0][0], f"session {session_id}")
            new = update(current.model_copy(deep=True))
            if new is None:
                return current
            db.execute(
                "INSERT OR REPLACE INTO sessions VALUES (?, ?, ?, ?)",
                (new.session_id, new.engine, new.updated_at, new.model_dump_json()),
            )
            return new

        return self._transaction(work, f"update session {session_id}")

    def list_sessions(self, engine: str | None = None) -> list[SessionRecord]:
        rows = (
            self._exec("SELECT id, body FROM sessions WHERE engine=? ORDER BY updated_at", (engine,))
            if engine
            else self._exec("SELECT id, body FROM sessions ORDER BY updated_at")
        )
        return [self._load(SessionRecord, body, f"session {sid}") for sid, body in rows]

    def delete_session(self, session_id: str) -> None:
        """Remove a session with its turns and events (its blobs stay: they are shared by content)."""

        def work(db: sqlite3.Connection) -> None:
            for table, column in (
                ("sessions", "id"),
                ("turns", "session_id"),
                ("events", "session_id"),
                ("turn_locks", "session_id"),
                ("approvals", "session_id"),
            ):
                db.execute(f"DELETE FROM {table} WHERE {column}=?", (session_id,))

        self._transaction(work, f"delete session {session_id}")

    # --- server API keys (hashes only) ----------------------------------------------------------

    def put_api_key(self, record: ApiKeyRecord) -> None:
        self._exec(
            "INSERT OR REPLACE INTO api_keys VALUES (?, ?, ?)",
            (record.key_id, record.created_at, record.model_dump_json()),
        )

    def get_api_key(self, key_id: str) -> ApiKeyRecord | None:
        rows = self._exec("SELECT key_id, body FROM api_keys WHERE key_id=?", (key_id,))
        return next((self._load(ApiKeyRecord, body, f"API key {kid}") for kid, body in rows), None)

    def list_api_keys(self) -> list[ApiKeyRecord]:
        rows = self._exec("SELECT key_id, body FROM api_keys ORDER BY created_at")
        return [self._load(ApiKeyRecord, body, f"API key {key_id}") for key_id, body in rows]

    # --- approvals (a tool call waiting for a person) ---------------------------------------------

    def put_approval(self, record: ApprovalRecord) -> None:
        self._exec(
            "INSERT OR REPLACE INTO approvals VALUES (?, ?, ?, ?, ?)",
            (
                record.session_id,
                record.request_id,
                int(record.pending),
                record.created_at,
                record.model_dump_json(),
            ),
        )

    def get_approval(self, session_id: str, request_id: str) -> ApprovalRecord | None:
        rows = self._exec(
            "SELECT body FROM approvals WHERE session_id=? AND request_id=?", (session_id, request_id)
        )
        return self._load(ApprovalRecord, rows[0][0], f"approval {request_id}") if rows else None

    def list_approvals(self, session_id: str, *, pending: bool = False) -> list[ApprovalRecord]:
        where = " AND pending=1" if pending else ""
        rows = self._exec(
            f"SELECT request_id, body FROM approvals WHERE session_id=?{where} ORDER BY created_at",
            (session_id,),
        )
        return [self._load(ApprovalRecord, body, f"approval {rid}") for rid, body in rows]

    def decide_approval(
        self,
        session_id: str,
        request_id: str,
        *,
        decision: ApprovalDecision | None = None,
        answer: str | None = None,
        by: DecidedBy,
        reason: str | None = None,
        key_id: str | None = None,
    ) -> ApprovalRecord:
        """The first decision wins (in one write transaction); see :func:`decided` for the refusals."""

        def work(db: sqlite3.Connection) -> ApprovalRecord:
            rows = db.execute(
                "SELECT body FROM approvals WHERE session_id=? AND request_id=?", (session_id, request_id)
            ).fetchall()
            if not rows:
                raise not_found(session_id, request_id)
            current = self._load(ApprovalRecord, rows[0][0], f"approval {request_id}")
            new = decided(current, decision=decision, answer=answer, by=by, reason=reason, key_id=key_id)
            db.execute(
                "UPDATE approvals SET pending=0, body=? WHERE session_id=? AND request_id=?",
                (new.model_dump_json(), session_id, request_id),
            )
            return new

        return self._transaction(work, f"decide approval {request_id} of session {session_id}")

    def reserve_turn(self, session_id: str, turn: int, holder: str) -> None:
        def work(db: sqlite3.Connection) -> str:
            db.execute(
                "INSERT OR IGNORE INTO turn_locks VALUES (?, ?, ?, ?)",
                (session_id, turn, holder, time.time()),
            )
            rows = db.execute(
                "SELECT holder FROM turn_locks WHERE session_id=? AND turn=?", (session_id, turn)
            ).fetchall()
            return str(rows[0][0])

        if self._transaction(work, f"reserve turn {turn} of session {session_id}") != holder:
            raise busy_error(session_id, turn)

    def renew_turn(self, session_id: str, turn: int, holder: str) -> None:
        def work(db: sqlite3.Connection) -> int:
            return db.execute(
                "UPDATE turn_locks SET at=? WHERE session_id=? AND turn=? AND holder=?",
                (time.time(), session_id, turn, holder),
            ).rowcount

        if not self._transaction(work, f"renew the lease on turn {turn} of session {session_id}"):
            self.reserve_turn(session_id, turn, holder)  # not reserved yet, or another holder's

    def get_turn_lease(self, session_id: str, turn: int) -> TurnLease | None:
        rows = self._exec(
            "SELECT holder, at FROM turn_locks WHERE session_id=? AND turn=?", (session_id, turn)
        )
        if not rows:
            return None
        return TurnLease(
            session_id=session_id, turn=turn, holder=str(rows[0][0]), renewed_at=float(rows[0][1])
        )

    def put_turn(self, record: TurnRecord) -> None:
        self._exec(
            "INSERT OR REPLACE INTO turns VALUES (?, ?, ?)",
            (record.session_id, record.turn, record.model_dump_json()),
        )

    def list_turns(self, session_id: str) -> list[TurnRecord]:
        rows = self._exec("SELECT turn, body FROM turns WHERE session_id=? ORDER BY turn", (session_id,))
        return [self._load(TurnRecord, body, f"turn {turn} of session {session_id}") for turn, body in rows]

    # --- events --------------------------------------------------------------------------------

    def append_events(self, session_id: str, turn: int, events: Sequence[AgentEvent]) -> None:
        if not events:
            return
        rows = [(session_id, turn, seq, e.model_dump_json()) for seq, e in event_rows(events)]
        self._transaction(
            lambda db: db.executemany("INSERT OR IGNORE INTO events VALUES (?, ?, ?, ?)", rows),
            f"append events to session {session_id}",
        )

    def read_events(
        self, session_id: str, turn: int | None = None, *, after_seq: int = -1
    ) -> list[AgentEvent]:
        if turn is None:
            rows = self._exec(
                "SELECT turn, seq, body FROM events WHERE session_id=? AND seq>? ORDER BY turn, seq",
                (session_id, after_seq),
            )
        else:
            rows = self._exec(
                "SELECT turn, seq, body FROM events WHERE session_id=? AND turn=? AND seq>? ORDER BY seq",
                (session_id, turn, after_seq),
            )
        events = [
            (turn_no, seq, self._event(body, f"event {seq} of session {session_id} turn {turn_no}"))
            for turn_no, seq, body in rows
        ]
        return merge_events(events, after_seq)

    def _event(self, body: str, what: str) -> AgentEvent:
        return load_event(body, self._where(what), self._fix())

    # --- blobs ---------------------------------------------------------------------------------

    def _blob_path(self, key: str) -> Path:
        check_blob_key(key)
        return self._blobs / key[:2] / key

    def put_blob(self, data: bytes) -> str:
        key = hashlib.sha256(data).hexdigest()
        path = self._blob_path(key)
        if path.exists():
            return key
        tmp: str | None = None
        try:
            path.parent.mkdir(mode=0o700, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
            with os.fdopen(fd, "wb") as handle:
                handle.write(data)
            os.replace(tmp, path)
        except OSError as exc:
            if tmp is not None:
                Path(tmp).unlink(missing_ok=True)
            raise StoreError(
                f"cannot write a blob to {path.parent}: {exc.strerror or exc}; free disk space or fix "
                "the directory's permissions, then retry",
                retryable=True,
            ) from None
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
            raise corrupt(f"blob {key}", "delete that file", f"its content at {path} does not match its hash")
        return data

    def delete_blob(self, key: str) -> None:
        path = self._blob_path(key)
        path.unlink(missing_ok=True)
        with contextlib.suppress(OSError):
            path.parent.rmdir()  # its two-letter folder, when now empty

    def close(self) -> None:
        with self._lock:
            self._db.close()
