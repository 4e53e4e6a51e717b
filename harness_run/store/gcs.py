"""History in a Google Cloud Storage bucket, shared by every machine that can reach it.

Only create-only objects (``if_generation_match=0``) and small compare-and-swap'd records, so that
many clients can write one history without a lock server::

    <prefix>/engines/<name>/versions/<version>.json      engine record (last writer wins)
    <prefix>/keys/<key_id>.json                           server API key record (its sha256, never the key)
    <prefix>/history/<engine>/                            one engine's folder (its identity's only reach):
      index/<session_id>                                  empty marker, for list_sessions
      sessions/<id>/session.json                          session record (CAS for update_session)
      sessions/<id>/turns/<turn:06d>.json                 turn record
      sessions/<id>/turns/<turn:06d>.lock                 turn reservation (create-only: one winner)
      sessions/<id>/events/<turn:06d>/<first_seq:08d>.jsonl   event segment per flush (create-only)
      sessions/<id>/events/<turn:06d>/sealed.jsonl        the turn's segments merged, once it ended
      blobs/<sha256>                                      snapshots, claim tickets (create-only)

Sessions written before the per-engine folders (``<prefix>/sessions/<id>/``, ``<prefix>/index/``,
``<prefix>/blobs/``) are still found, listed, read and deleted there; the first write moves one
into its engine's folder (``_gcs_layout``). ``GcsStore(..., engine=E)`` (:meth:`GcsStore.for_engine`)
keeps an engine's sessions and blobs in its folder; ``confined=True`` (the worker in a sandbox)
also refuses, before sending it, any request outside that folder.

``google-cloud-storage`` is imported only when a store is opened. With ``STORAGE_EMULATOR_HOST``
set (fake-gcs-server) no credentials are needed. Transient errors (429, 5xx, dropped connections)
are retried with backoff; every request that is retried is safe to repeat.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import random
import time
import uuid
from collections.abc import Sequence
from typing import Any, cast

from harness_run.errors import StoreError, UsageError
from harness_run.events import AgentEvent
from harness_run.store._common import (
    busy_error,
    check_blob_key,
    corrupt,
    event_rows,
    load_event,
    merge_events,
)
from harness_run.store._gcs_approvals import GcsApprovals
from harness_run.store._gcs_io import Conflict
from harness_run.store._gcs_layout import GcsLayout, check_part
from harness_run.store._protocol import SessionUpdate
from harness_run.store._records import ApiKeyRecord, EngineRecord, SessionRecord, TurnLease, TurnRecord

__all__ = ["GcsStore"]

_CAS_ATTEMPTS = 60
_SEALED = "sealed.jsonl"
_log = logging.getLogger("harness_run.store")
_WRITERS_KEPT = 8


def _writers(data: bytes) -> list[str]:
    """The ``_writers`` tokens stored with a session record by update_session (none after a put)."""
    try:
        body: object = json.loads(data)
    except ValueError:
        return []
    found = cast(dict[str, object], body).get("_writers") if isinstance(body, dict) else None
    return [str(t) for t in cast(list[object], found)] if isinstance(found, list) else []


_check_part = check_part


class GcsStore(GcsApprovals, GcsLayout):
    """History under ``gs://<bucket>/<prefix>``; see the module docstring for the layout.

    ``client`` is a ``google.cloud.storage.Client`` to reuse (not closed by :meth:`close`); without
    one a client is made for ``project`` with Application Default Credentials (on GKE: Workload
    Identity), or anonymously when ``STORAGE_EMULATOR_HOST`` points at an emulator.

    Transient failures (429, 5xx, connection errors) are retried with exponential backoff starting
    at ``retry_delay`` seconds for up to ``retry_timeout`` seconds; each request may take up to
    ``request_timeout`` seconds.

    ``engine``: keep that engine's sessions, turns, events and blobs in ``history/<engine>/`` and
    see no other engine's (an engine's runtime uses such a view: :meth:`for_engine`); ``confined``:
    also refuse any request outside that folder with a ``StoreError`` (the worker in a sandbox,
    whose identity IAM confines to the folder; such a store reads no session of the old layout).
    """

    def __init__(
        self,
        bucket: str,
        prefix: str = "",
        *,
        project: str | None = None,
        client: Any = None,
        retry_timeout: float = 60.0,
        retry_delay: float = 1.0,
        request_timeout: float = 30.0,
        engine: str | None = None,
        confined: bool = False,
    ) -> None:
        if confined and engine is None:
            raise UsageError(
                "GcsStore(confined=True) needs engine=: the engine whose folder it is confined to"
            )
        super().__init__(
            bucket,
            prefix,
            project=project,
            client=client,
            retry_timeout=retry_timeout,
            retry_delay=retry_delay,
            request_timeout=request_timeout,
            engine=engine,
        )
        self._parent: GcsStore | None = None
        self._setup_layout(engine, confined)

    def for_engine(self, engine: str) -> GcsStore:
        """A view of this store for one engine's runtime (same client; closing it closes this store)."""
        if self.engine == engine:
            return self
        project, retry_timeout, retry_delay, request_timeout = self._settings
        view = GcsStore(
            self.bucket_name,
            self.prefix,
            project=project,
            client=self._client,
            retry_timeout=retry_timeout,
            retry_delay=retry_delay,
            request_timeout=request_timeout,
            engine=engine,
        )
        view._parent = self
        view._only = self._only
        return view

    # --- engines -------------------------------------------------------------------------------

    def _engine_name(self, name: str, version: str) -> str:
        return self._name("engines", _check_part("engine name", name), "versions", f"{version}.json")

    def put_engine(self, record: EngineRecord) -> None:
        name = self._engine_name(record.name, _check_part("engine version", record.version))
        meta = {"created_at": repr(record.created_at)}  # lets get_engine pick the latest from a listing
        self._write(name, record.model_dump_json().encode(), generation=None, metadata=meta)

    def _engines(self, prefix: str) -> list[EngineRecord]:
        names = [b.name for b in self._list(prefix) if b.name.endswith(".json")]
        return self._get_records(EngineRecord, names)

    def get_engine(self, name: str, version: str | None = None) -> EngineRecord | None:
        _check_part("engine name", name)
        if version:
            exact = self._get_record(EngineRecord, self._engine_name(name, _check_part("version", version)))
            if exact is not None:
                return exact
        blobs = [
            b
            for b in self._list(self._name("engines", name, "versions", version or ""))
            if b.name.endswith(".json")
        ]
        stamps: list[tuple[float, str]] = []
        for blob in blobs:
            try:
                stamps.append((float(dict(blob.metadata or {})["created_at"]), blob.name))
            except (KeyError, ValueError):
                break
        if blobs and len(stamps) == len(blobs):  # read only the latest one
            latest = self._get_record(EngineRecord, max(stamps)[1])
            if latest is not None:
                return latest
        found = self._get_records(EngineRecord, [b.name for b in blobs])
        return max(found, key=lambda e: e.created_at) if found else None

    def list_engines(self, name: str | None = None) -> list[EngineRecord]:
        if name:
            return sorted(
                self._engines(self._name("engines", _check_part("engine name", name), "versions", "")),
                key=lambda e: e.created_at,
            )
        return sorted(self._engines(self._name("engines", "")), key=lambda e: (e.name, e.created_at))

    def delete_engine(self, name: str, version: str) -> None:
        self._delete(self._engine_name(name, _check_part("engine version", version)))

    # --- sessions ------------------------------------------------------------------------------

    def _check_engine(self, engine: str) -> str:
        if self.engine is not None and engine != self.engine:
            raise UsageError(
                f"this history store is engine {self.engine!r}'s view; a record of engine {engine!r} "
                "does not belong in it (open the store without engine= for every engine's sessions)"
            )
        return check_part("engine name", engine)

    def _index(self, record: SessionRecord) -> None:
        """The list_sessions marker, written before the record so a listed session is never lost."""
        if record.session_id in self._indexed:
            return
        name = self._home(self._check_engine(record.engine), "index", record.session_id)
        with contextlib.suppress(Conflict):  # already indexed
            self._write(name, b"", generation=0, content_type="text/plain")
        self._indexed.add(record.session_id)

    def put_session(self, record: SessionRecord) -> None:
        sid = check_part("session id", record.session_id)
        engine = self._check_engine(record.engine)
        if sid not in self._homes and self._legacy_record(sid) is not None:
            self._session_name(sid, write=True)  # an old-layout session: move it first
        self._homes[sid] = engine
        self._index(record)
        self._write(
            self._home(engine, "sessions", sid, "session.json"),
            record.model_dump_json().encode(),
            generation=None,
        )

    def get_session(self, session_id: str) -> SessionRecord | None:
        record = self._get_record(SessionRecord, self._session_name(session_id))
        if record is not None and self.engine is not None and record.engine != self.engine:
            return None  # another engine's session in the old layout: not this view's
        return record

    def update_session(self, session_id: str, update: SessionUpdate) -> SessionRecord | None:
        """Read, ``update``, write back only if nobody wrote meanwhile (else re-read and re-apply).

        Each such write also records a random token in the object (``_writers``, the last few
        writers): when a write's reply is lost and its retry meets the precondition, the next read
        shows whether the write landed, so an update is never applied twice.
        """
        name = self._session_name(session_id, write=True)
        sent: list[tuple[str, SessionRecord]] = []
        for attempt in range(_CAS_ATTEMPTS):
            got = self._read(name)
            if got is None:
                return None
            if got[1] == 0:
                raise StoreError(f"cannot update {self._where(name)}: the server sent no object generation")
            current = self._load(SessionRecord, got[0], name)
            writers = _writers(got[0])
            for token, wrote in sent:
                if token in writers:  # a write whose reply was lost did land
                    return wrote
            new = update(current.model_copy(deep=True))
            if new is None:
                return current
            token = uuid.uuid4().hex
            body = {**new.model_dump(mode="json"), "_writers": [*writers[-(_WRITERS_KEPT - 1) :], token]}
            self._index(new)
            try:
                self._write(name, json.dumps(body).encode(), generation=got[1])
                return new
            except Conflict:
                sent.append((token, new))
            time.sleep(random.uniform(0, min(0.2, 0.005 * 2**attempt)))
        raise StoreError(
            f"cannot update {self._where(name)}: it kept changing under {_CAS_ATTEMPTS} attempts; "
            "too many writers on one session — try again",
            retryable=True,
        )

    def list_sessions(self, engine: str | None = None) -> list[SessionRecord]:
        if engine is not None:
            check_part("engine name", engine)
            if self.engine is not None and engine != self.engine:
                if self.confined:
                    self._confine("list", self._home(engine, "index", ""))
                return []
        engine = engine or self.engine
        engines = [engine] if engine else self._engine_names()
        listed = self._map(lambda e: self._list(self._home(e, "index", "")), engines)
        names: dict[str, str] = {}
        for e, blobs in zip(engines, listed, strict=True):
            for blob in blobs:
                sid = blob.name.rsplit("/", 1)[-1]
                names[sid] = self._home(e, "sessions", sid, "session.json")
        if self._legacy:  # sessions of the old shared layout not moved yet
            old = (
                self._name("index", check_part("engine name", engine), "")
                if engine
                else self._name("index", "")
            )
            for blob in self._list(old):
                sid = blob.name.rsplit("/", 1)[-1]
                names.setdefault(sid, self._name("sessions", sid, "session.json"))
        records = self._get_records(SessionRecord, [names[i] for i in sorted(names)])
        if engine:
            records = [r for r in records if r.engine == engine]
        return sorted(records, key=lambda r: (r.updated_at, r.session_id))

    # --- turns ---------------------------------------------------------------------------------

    def reserve_turn(self, session_id: str, turn: int, holder: str) -> None:
        name = self._session_name(session_id, "turns", f"{turn:06d}.lock", write=True)
        body = json.dumps({"holder": holder, "at": time.time()}).encode()
        try:
            self._write(name, body, generation=0)
            return
        except Conflict:
            pass
        got = self._read(name)
        if got is None:  # deleted meanwhile; nothing deletes locks, so treat it as taken
            raise busy_error(session_id, turn)
        if self._lease(name, session_id, turn, got[0]).holder != holder:
            raise busy_error(session_id, turn)

    def _lease(self, name: str, session_id: str, turn: int, data: bytes) -> TurnLease:
        try:
            body = json.loads(data)
            return TurnLease(
                session_id=session_id, turn=turn, holder=str(body["holder"]), renewed_at=float(body["at"])
            )
        except (ValueError, KeyError, TypeError):
            raise StoreError(
                f"the turn reservation {self._where(name)} is corrupt; nothing was changed — "
                "delete that object if no client is running that turn"
            ) from None

    def renew_turn(self, session_id: str, turn: int, holder: str) -> None:
        name = self._session_name(session_id, "turns", f"{turn:06d}.lock", write=True)
        for _ in range(_CAS_ATTEMPTS):
            got = self._read(name)
            if got is None:
                self.reserve_turn(session_id, turn, holder)
                return
            if self._lease(name, session_id, turn, got[0]).holder != holder:
                raise busy_error(session_id, turn)
            body = json.dumps({"holder": holder, "at": time.time()}).encode()
            try:
                self._write(name, body, generation=got[1])
                return
            except Conflict:  # a retried write of our own, or a concurrent renewal: read again
                continue
        raise StoreError(f"cannot renew {self._where(name)}: it kept changing; try again", retryable=True)

    def get_turn_lease(self, session_id: str, turn: int) -> TurnLease | None:
        name = self._session_name(session_id, "turns", f"{turn:06d}.lock")
        got = self._read(name)
        return self._lease(name, session_id, turn, got[0]) if got is not None else None

    def put_turn(self, record: TurnRecord) -> None:
        name = self._session_name(record.session_id, "turns", f"{record.turn:06d}.json", write=True)
        self._write(name, record.model_dump_json().encode(), generation=None)
        if record.result is not None:
            self._seal_later(record.session_id, record.turn)

    def list_turns(self, session_id: str) -> list[TurnRecord]:
        blobs = self._list(self._session_name(session_id, "turns", ""))
        names = sorted(b.name for b in blobs if b.name.endswith(".json"))
        return sorted(self._get_records(TurnRecord, names), key=lambda t: t.turn)

    # --- events --------------------------------------------------------------------------------

    def _segment(self, name: str, data: bytes) -> list[tuple[int, AgentEvent]]:
        """The ``(seq, event)`` lines of a segment: ``{"seq": 3, "event": {…the event's JSON…}}``."""
        rows: list[tuple[int, AgentEvent]] = []
        what, fix = f"the event segment {self._where(name)}", "restore or delete that object"
        for lineno, line in enumerate(data.splitlines(), 1):
            if not line.strip():
                continue
            try:
                item: object = json.loads(line)
            except ValueError:
                item = None
            fields = cast(dict[str, object], item) if isinstance(item, dict) else {}
            seq, event = fields.get("seq"), fields.get("event")
            if not isinstance(seq, int) or not isinstance(event, dict):
                raise corrupt(what, fix, f"line {lineno} is not a seq and an event")
            rows.append((seq, load_event(cast(dict[str, Any], event), f"{what} (line {lineno})", fix)))
        return rows

    def _put_segment(self, name: str, rows: Sequence[tuple[int, AgentEvent]]) -> None:
        body = "".join(f'{{"seq":{s},"event":{e.model_dump_json()}}}\n' for s, e in rows)
        meta = {"last_seq": str(max(s for s, _ in rows))}
        self._write(name, body.encode(), generation=0, metadata=meta, content_type="application/jsonl")

    def append_events(self, session_id: str, turn: int, events: Sequence[AgentEvent]) -> None:
        """One create-only segment per call; a segment already there keeps its events (first wins)."""
        rows: list[tuple[int, AgentEvent]] = event_rows(events)
        while rows:
            name = self._session_name(
                session_id, "events", f"{turn:06d}", f"{rows[0][0]:08d}.jsonl", write=True
            )
            try:
                self._put_segment(name, rows)
                self._remember(session_id, turn, name, rows)
                return
            except Conflict:
                got = self._read(name)
                if got is None:
                    continue  # gone again: create it on the next round
                stored_rows = self._segment(name, got[0])
                stored = {seq for seq, _ in stored_rows}
                if rows[0][0] not in stored:
                    raise corrupt(
                        f"the event segment {self._where(name)}",
                        "restore or delete that object",
                        "it does not hold its own first seq",
                    ) from None
                self._remember(session_id, turn, name, stored_rows)
                rows = [r for r in rows if r[0] not in stored]

    def _remember(self, session_id: str, turn: int, name: str, rows: list[tuple[int, AgentEvent]]) -> None:
        """Keep what this client stored for a running turn, to seal the turn without reading it back."""
        with self._pool_lock:
            self._written.setdefault((session_id, turn), {})[name] = rows

    def _seal_later(self, session_id: str, turn: int) -> None:
        """After the turn's result: merge its segments into one ``sealed.jsonl`` (in the background)."""
        with self._pool_lock:
            written = self._written.pop((session_id, turn), None)
        if written is None:  # only the client that streamed the turn seals it
            return

        def seal() -> None:
            try:
                self._seal(session_id, turn, written)
            except Exception as exc:  # the segments stay readable; sealing only saves later reads
                _log.warning("could not seal the events of session %s turn %s: %s", session_id, turn, exc)

        self._submit(seal)

    def _seal(self, session_id: str, turn: int, written: dict[str, list[tuple[int, AgentEvent]]]) -> None:
        prefix = self._session_name(session_id, "events", f"{turn:06d}/")
        names = sorted(b.name for b in self._list(prefix) if b.name.endswith(".jsonl"))
        sealed = prefix + _SEALED
        if sealed in names or len(names) < 2:
            return
        merged: dict[int, AgentEvent] = {}
        for name in names:
            rows = written.get(name)
            if rows is None:
                got = self._read(name)
                rows = self._segment(name, got[0]) if got else []
            for seq, event in rows:
                merged.setdefault(seq, event)
        with contextlib.suppress(Conflict):  # sealed by someone else meanwhile
            self._put_segment(sealed, sorted(merged.items(), key=lambda item: item[0]))

    def read_events(
        self, session_id: str, turn: int | None = None, *, after_seq: int = -1
    ) -> list[AgentEvent]:
        root = self._session_name(session_id, "events", "")
        listed: list[tuple[int, str, int | None]] = []  # (turn, object, last_seq)
        for blob in self._list(root + (f"{turn:06d}/" if turn is not None else "")):
            parts = blob.name[len(root) :].split("/")
            if len(parts) != 2 or not parts[0].isdigit() or not parts[1].endswith(".jsonl"):
                continue
            meta = dict(blob.metadata or {}).get("last_seq", "")
            listed.append((int(parts[0]), blob.name, int(meta) if meta.lstrip("-").isdigit() else None))
        sealed: dict[int, int] = {}
        for turn_no, name, last in listed:
            if name.endswith("/" + _SEALED) and last is not None:
                sealed[turn_no] = last
        wanted: list[tuple[int, str]] = []
        for turn_no, name, last in sorted(listed, key=lambda item: not item[1].endswith("/" + _SEALED)):
            if last is not None:
                if last <= after_seq:
                    continue  # every event in it is at or before the caller's offset
                if not name.endswith("/" + _SEALED) and turn_no in sealed and last <= sealed[turn_no]:
                    continue  # the sealed object holds these
            wanted.append((turn_no, name))
        segments = self._map(self._read, [n for _, n in wanted])
        rows: list[tuple[int, int, AgentEvent]] = []
        for (turn_no, name), got in zip(wanted, segments, strict=True):
            if got is not None:
                rows.extend((turn_no, seq, event) for seq, event in self._segment(name, got[0]))
        return merge_events(rows, after_seq)

    # --- server API keys (hashes only) ----------------------------------------------------------

    def put_api_key(self, record: ApiKeyRecord) -> None:
        name = self._name("keys", f"{check_part('API key id', record.key_id)}.json")
        self._write(name, record.model_dump_json().encode(), generation=None)

    def get_api_key(self, key_id: str) -> ApiKeyRecord | None:
        """One key's record by id (one read: what a request's key check costs)."""
        if not key_id or not key_id.isalnum():  # a key id is hex; anything else names no object
            return None
        return self._get_record(ApiKeyRecord, self._name("keys", f"{key_id}.json"))

    def list_api_keys(self) -> list[ApiKeyRecord]:
        names = [b.name for b in self._list(self._name("keys", "")) if b.name.endswith(".json")]
        return sorted(self._get_records(ApiKeyRecord, names), key=lambda r: (r.created_at, r.key_id))

    # --- blobs ---------------------------------------------------------------------------------

    def delete_session(self, session_id: str) -> None:
        """Both layouts: the engine's folder and (unconfined) what the old layout still holds."""
        engine, _ = self._locate(check_part("session id", session_id))
        legacy = self._legacy_record(session_id)
        if legacy is not None and self.engine is not None and legacy.engine != self.engine:
            legacy = None  # another engine's session: not this view's to delete
        roots = [self._home(engine, "sessions", session_id, "")] if engine else []
        if self._legacy and (legacy is not None or engine is None):
            roots.append(self._name("sessions", session_id, ""))
        for root in roots:
            names = [b.name for b in self._list(root)]
            for name in sorted(names, key=lambda n: n.endswith("session.json")):  # the record last
                self._delete(name)
        if engine:
            self._delete(self._home(engine, "index", session_id))
        if legacy is not None:
            self._delete(self._name("index", check_part("engine name", legacy.engine), session_id))
        self._indexed.discard(session_id)
        self._homes.pop(session_id, None)

    def _blob_name(self, key: str) -> str:
        check_blob_key(key)
        return self._home(self.engine, "blobs", key) if self.engine else self._name("blobs", key)

    def put_blob(self, data: bytes) -> str:
        """In the engine's folder (a view), else in the shared ``blobs/`` of the old layout."""
        key = hashlib.sha256(data).hexdigest()
        with contextlib.suppress(Conflict):  # content-addressed: already there
            self._write(self._blob_name(key), data, generation=0, content_type="application/octet-stream")
        return key

    def get_blob(self, key: str) -> bytes | None:
        name = self._blob_name(key)
        got = self._read(name)
        if got is None and self.engine is not None and self._legacy:  # a snapshot of the old layout
            name = self._name("blobs", key)
            got = self._read(name)
        if got is None:
            return None
        if hashlib.sha256(got[0]).hexdigest() != key:
            raise corrupt(f"blob {key}", "delete that object", f"{self._where(name)} does not match its hash")
        return got[0]

    def delete_blob(self, key: str) -> None:
        self._delete(self._blob_name(key))

    def close(self) -> None:
        with self._pool_lock:
            if self._pool is not None:
                self._pool.shutdown(wait=True)
                self._pool = None
        if self._parent is not None:
            self._parent.close()
        if self._owns_client:
            with contextlib.suppress(Exception):  # closing a transport never matters to the caller
                self._client.close()
