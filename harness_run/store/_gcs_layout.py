"""Where a session lives in the bucket: its engine's own folder, or the shared layout of old versions.

New sessions go under ``<prefix>/history/<engine>/`` (a managed folder per engine, so IAM can give
each engine's identity that folder only). Sessions written by versions before it stay readable
where they are (``<prefix>/sessions/<id>/``); the first write to one through an unconfined store
moves it (:meth:`GcsLayout._migrate`: create-only copies, the record last, then the old objects
deleted — repeatable after a crash at any point).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable

from harness_run.errors import UsageError
from harness_run.store._gcs_io import Conflict, GcsObjects
from harness_run.store._records import SessionRecord, TurnRecord
from harness_run.vocab.gcp import HISTORY_FOLDER

__all__ = ["HISTORY", "GcsLayout", "check_part"]

HISTORY = HISTORY_FOLDER
"""The folder of per-engine history: ``<prefix>/history/<engine>/{index,sessions,blobs}/``."""


def check_part(kind: str, value: str) -> str:
    if not value or "/" in value or value in {".", ".."} or any(ord(c) < 32 for c in value):
        raise UsageError(
            f"{kind} {value!r} cannot be used in a GCS object name: no '/', no control characters"
        )
    return value


class GcsLayout(GcsObjects):
    """Session placement: ``_session_name`` resolves a session's home (and moves an old one on write)."""

    _only: tuple[str, ...] | None
    """The only engines whose folders are used (:meth:`only_engines`); None: every one, found by listing."""
    _homes: dict[str, str]
    """session id -> its engine, for sessions known to be in the per-engine layout (they never move back)."""

    def _setup_layout(self, engine: str | None, confined: bool) -> None:
        self._homes = {}
        self._only: tuple[str, ...] | None = None
        if engine is not None:
            check_part("engine name", engine)
            if confined:
                self._confined_to = self._name(HISTORY, engine, "")

    @property
    def confined(self) -> bool:
        return self._confined_to is not None

    def _home(self, engine: str, *rest: str) -> str:
        return self._name(HISTORY, check_part("engine name", engine), *rest)

    def _exists(self, name: str) -> bool:
        self._confine("read", name)
        blob = self._bucket.blob(name)
        return bool(
            self._call(
                f"read {self._where(name)}", lambda: blob.exists(retry=self._retry, timeout=self._timeout)
            )
        )

    def only_engines(self, engines: Iterable[str]) -> None:
        """Use ``engines``' folders only: no listing of ``history/``, no old shared layout. A team
        server's account may reach just the folders of the engines it serves (managed folders);
        views made afterwards (:meth:`for_engine`) inherit this."""
        self._only = tuple(sorted({check_part("engine name", e) for e in engines}))

    @property
    def _legacy(self) -> bool:
        """Whether sessions of the old shared layout are looked for (not when confined or limited)."""
        return not self.confined and self._only is None

    def _legacy_record(self, session_id: str) -> SessionRecord | None:
        if not self._legacy:
            return None
        return self._get_record(SessionRecord, self._name("sessions", session_id, "session.json"))

    def _engine_names(self) -> list[str]:
        """Engines with a folder under ``history/`` (one delimiter listing)."""
        root = self._name(HISTORY, "")
        if self.engine is not None:
            return [self.engine]
        if self._only is not None:
            return list(self._only)

        def listing() -> list[str]:
            found = self._client.list_blobs(
                self._bucket, prefix=root, delimiter="/", retry=self._retry, timeout=self._timeout
            )
            for _ in found:  # the prefixes arrive with the pages
                pass
            return sorted(p[len(root) :].strip("/") for p in found.prefixes)

        return self._call(f"list {self._where(root)}", listing)

    def _locate(self, session_id: str) -> tuple[str | None, bool]:
        """``(engine, in the per-engine layout)``; ``(None, False)``: no record anywhere (the shared
        layout then, as before: only an unconfined store without an engine gets there)."""
        known = self._homes.get(session_id)
        if known is not None:
            return known, True
        if self.engine is not None:
            if self.confined or self._exists(self._home(self.engine, "sessions", session_id, "session.json")):
                return self.engine, True
            legacy = self._legacy_record(session_id)
            return self.engine, legacy is None or legacy.engine != self.engine
        legacy = self._legacy_record(session_id)
        if legacy is not None:
            if self._exists(self._home(legacy.engine, "sessions", session_id, "session.json")):
                self._homes[session_id] = legacy.engine  # moved; leftovers of a crashed move remain
                return legacy.engine, True
            return legacy.engine, False
        engines = self._engine_names()
        found = self._map(
            lambda e: self._exists(self._home(e, "sessions", session_id, "session.json")), engines
        )
        for engine, there in zip(engines, found, strict=True):
            if there:
                self._homes[session_id] = engine
                return engine, True
        return None, False

    def _session_name(self, session_id: str, *rest: str, write: bool = False) -> str:
        """The object name of ``rest`` (default the record) of a session, wherever the session lives;
        a write to a session of the old shared layout first moves it to its engine's folder."""
        check_part("session id", session_id)
        parts = rest or ("session.json",)
        engine, moved = self._locate(session_id)
        if engine is not None and not moved and write:
            self._migrate(engine, session_id)
            moved = True
        if engine is not None and moved:
            self._homes[session_id] = engine
            return self._home(engine, "sessions", session_id, *parts)
        return self._name("sessions", session_id, *parts)

    def _copy(self, source: str, target: str) -> None:
        """Server-side copy, create-only: a target already there (an earlier, interrupted move) stays."""
        self._confine("read", source)
        self._confine("write", target)
        blob = self._bucket.blob(source)

        def copy() -> None:
            self._bucket.copy_blob(
                blob, self._bucket, target, if_generation_match=0, retry=self._retry, timeout=self._timeout
            )

        with contextlib.suppress(Conflict, self._gexc.NotFound):  # copied before / moved by another client
            self._call(f"copy {self._where(source)} to {self._where(target)}", copy)

    def _migrate(self, engine: str, session_id: str) -> None:
        """Move a session of the shared layout into ``engine``'s folder (see the module docstring)."""
        old = self._name("sessions", session_id, "")
        new = self._home(engine, "sessions", session_id, "")
        names = sorted(b.name for b in self._list(old))
        record = old + "session.json"
        keys = self._snapshot_keys([n for n in names if n.endswith(".json") and "/turns/" in n])
        legacy = self._legacy_record(session_id)
        if legacy is not None and legacy.snapshot is not None:
            keys.update(k for k in (legacy.snapshot.workspace, legacy.snapshot.native) if k)
        self._map(lambda n: self._copy(n, new + n[len(old) :]), [n for n in names if n != record])
        self._map(lambda k: self._copy(self._name("blobs", k), self._home(engine, "blobs", k)), sorted(keys))
        with contextlib.suppress(Conflict):
            self._write(self._home(engine, "index", session_id), b"", generation=0, content_type="text/plain")
        if record in names:
            self._copy(record, new + "session.json")  # from now on the session lives in the new place
        for name in ([record] if record in names else []) + [n for n in names if n != record]:
            self._delete(name)
        self._delete(self._name("index", engine, session_id))

    def _snapshot_keys(self, turn_objects: Iterable[str]) -> set[str]:
        keys: set[str] = set()
        for turn in self._get_records(TurnRecord, list(turn_objects)):
            if turn.snapshot is not None:
                keys.update(k for k in (turn.snapshot.workspace, turn.snapshot.native) if k)
        return keys

    def _delete(self, obj: str) -> None:
        self._confine("delete", obj)
        blob = self._bucket.blob(obj)
        try:
            self._call(
                f"delete {self._where(obj)}", lambda: blob.delete(retry=self._retry, timeout=self._timeout)
            )
        except self._gexc.NotFound:
            return
