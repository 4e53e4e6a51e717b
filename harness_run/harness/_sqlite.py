"""Blanking secret values inside a harness's SQLite files (OpenCode's session store, Codex's thread
index): byte-wise replacement would corrupt a database, so it is done in SQL."""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from pathlib import Path

__all__ = ["SQLITE_MAGIC", "scrub_sqlite"]

SQLITE_MAGIC = b"SQLite format 3\x00"
"""The first 16 bytes of every SQLite database file."""


def scrub_sqlite(db: Path, forms: Sequence[str]) -> bool:
    """Replace ``forms`` by ``***`` in every text column of ``db`` (also where a value spans pages),
    fold its WAL in, drop freed pages; True when the file is then free of them. Call it only while
    no process has the database open for writing (between turns)."""
    if not _may_hold(db, forms):
        return True
    try:
        conn = sqlite3.connect(db, timeout=10, isolation_level=None)
        try:
            tables = conn.execute(
                "SELECT name FROM sqlite_master WHERE type='table' AND name NOT LIKE 'sqlite_%'"
            )
            columns = [
                (t, c[1])
                for (t,) in tables.fetchall()
                for c in conn.execute(f'PRAGMA table_info("{t}")')
                if "TEXT" in str(c[2]).upper()
            ]
            conn.execute("BEGIN")
            for (table, column), form in [(tc, f) for tc in columns for f in forms]:
                sql = (
                    f'UPDATE "{table}" SET "{column}" = replace("{column}", ?, ?) WHERE instr("{column}", ?)'
                )
                conn.execute(sql, (form, "***", form))
            conn.execute("COMMIT")
            conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            data = db.read_bytes()
            if conn.total_changes or any(f.encode() in data for f in forms):
                conn.execute("VACUUM")  # freed pages would still hold the old values
                conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
                data = db.read_bytes()
        finally:
            conn.close()
    except (sqlite3.Error, OSError):
        return False
    return not any(f.encode() in data for f in forms)


def _may_hold(db: Path, forms: Sequence[str]) -> bool:
    """Whether the database or its WAL may hold a form: a value spilling over to another page is
    cut by that page's 4-byte header once (forms are shorter than a page), so one of the form's
    halves is always whole in the file. A cheap check that spares the scrub of a clean database."""
    try:
        data = db.read_bytes()
        wal = db.with_name(db.name + "-wal")
        if wal.is_file():
            data += wal.read_bytes()
    except OSError:
        return True
    for form in forms:
        raw = form.encode()
        half = len(raw) // 2
        if len(raw) > 2048 or raw[:half] in data or raw[half:] in data:
            return True
    return False
