"""Server API keys: ``hrk_<key id>_<secret>``; the store keeps the key id and the key's sha256 only.

Checking a key looks its id up and compares the hash in constant time, so a wrong key and an
unknown one take the same path and neither the key nor its hash ever appears in a message.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import threading
import time
from typing import Protocol, cast, runtime_checkable

from harness_run.errors import UsageError
from harness_run.store import ApiKeyRecord, HistoryStore

__all__ = ["CachedKeys", "KeyStore", "check_key", "create_key", "key_store", "list_keys", "revoke_key"]

_PREFIX = "hrk"


@runtime_checkable
class KeyStore(Protocol):
    """The part of a history store that keeps API keys (the SQLite and GCS stores have it)."""

    def put_api_key(self, record: ApiKeyRecord) -> None: ...

    def get_api_key(self, key_id: str) -> ApiKeyRecord | None: ...

    def list_api_keys(self) -> list[ApiKeyRecord]: ...


def key_store(store: HistoryStore) -> KeyStore:
    """``store`` as a key store, or a UsageError saying which store to use."""
    if not isinstance(store, KeyStore):
        raise UsageError(
            f"{store!r} cannot keep server API keys; serve from a directory (SQLite) or a "
            "gs://bucket/prefix store"
        )
    return cast(KeyStore, store)


class CachedKeys:
    """A key store whose ``get_api_key`` answers are kept for ``ttl`` seconds: on a GCS store each
    request's key check would otherwise be one bucket read. A revoked key (or a new one) is seen
    within ``ttl`` seconds; writes go straight through."""

    def __init__(self, store: KeyStore, ttl: float) -> None:
        self.store = store
        self.ttl = ttl
        self._lock = threading.Lock()
        self._seen: dict[str, tuple[float, ApiKeyRecord | None]] = {}

    def put_api_key(self, record: ApiKeyRecord) -> None:
        self.store.put_api_key(record)
        with self._lock:
            self._seen.pop(record.key_id, None)

    def get_api_key(self, key_id: str) -> ApiKeyRecord | None:
        now = time.monotonic()
        with self._lock:
            hit = self._seen.get(key_id)
        if hit is not None and now - hit[0] < self.ttl:
            return hit[1]
        record = self.store.get_api_key(key_id)
        with self._lock:
            if len(self._seen) > 10_000:  # unknown ids are cached too: bound the table
                self._seen.clear()
            self._seen[key_id] = (now, record)
        return record

    def list_api_keys(self) -> list[ApiKeyRecord]:
        return self.store.list_api_keys()


def _digest(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


def create_key(store: KeyStore, name: str) -> tuple[ApiKeyRecord, str]:
    """A new key named ``name``: its record (stored) and the key itself (shown once, never stored)."""
    if not name.strip():
        raise UsageError("an API key needs a name (--name), e.g. the person or client using it")
    key_id = secrets.token_hex(4)
    key = f"{_PREFIX}_{key_id}_{secrets.token_urlsafe(24)}"
    record = ApiKeyRecord(key_id=key_id, name=name.strip(), sha256=_digest(key), created_at=time.time())
    store.put_api_key(record)
    return record, key


def list_keys(store: KeyStore) -> list[ApiKeyRecord]:
    return store.list_api_keys()


def revoke_key(store: KeyStore, key_id: str) -> ApiKeyRecord:
    """Revoke the key with this id (from ``keys list``); its requests get 401 from now on."""
    for record in store.list_api_keys():
        if record.key_id == key_id:
            if record.revoked_at is None:
                record = record.model_copy(update={"revoked_at": time.time()})
                store.put_api_key(record)
            return record
    raise UsageError(f"no API key with id {key_id!r}; list them with `harness-run serve keys list`")


def check_key(store: KeyStore, header: str | None) -> ApiKeyRecord | None:
    """The live key record an ``Authorization: Bearer <key>`` header names, else None."""
    scheme, _, key = (header or "").partition(" ")
    if scheme.lower() != "bearer" or not key.startswith(f"{_PREFIX}_"):
        return None
    key_id = key.split("_")[1] if key.count("_") >= 2 else ""
    digest = _digest(key.strip())
    record = store.get_api_key(key_id) if key_id else None
    # a missing key is compared with a dummy hash: unknown and wrong keys take the same path
    matches = hmac.compare_digest(record.sha256 if record is not None else "0" * 64, digest)
    if record is None or not matches or record.revoked_at is not None:
        return None
    return record
