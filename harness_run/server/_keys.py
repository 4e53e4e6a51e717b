"""Server API keys: ``hrk_<key id>_<secret>``; the store keeps the key id and the key's sha256 only.

Checking a key looks its id up and compares the hash in constant time, so a wrong key and an
unknown one take the same path and neither the key nor its hash ever appears in a message.

Every record carries ``mac``, an HMAC-SHA256 of its fields under the server's secret
(:func:`server_secret`): the secret is not in the store, so whoever can write the store (an agent,
a leaked bucket credential) still cannot make a key the server accepts, nor widen one's scopes, nor
lift a revocation.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import secrets
import threading
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Literal, Protocol, cast, runtime_checkable

from harness_run.errors import UsageError
from harness_run.store import ApiKeyRecord, HistoryStore, KeyScope

__all__ = [
    "SECRET_ENV",
    "CachedKeys",
    "KeyStore",
    "check_key",
    "create_key",
    "key_store",
    "list_keys",
    "record_valid",
    "revoke_key",
    "server_secret",
]

_PREFIX = "hrk"
SECRET_ENV = "HARNESS_RUN_SERVER_SECRET"
"""The server's secret (any string of 32+ characters; on Cloud Run, from Secret Manager). Without
it the secret is kept in ``$HARNESS_RUN_CONFIG_DIR/server-secret`` (default
``~/.config/harness-run/server-secret``, mode 0600, made on first use)."""


def _secret_file() -> Path:
    root = os.environ.get("HARNESS_RUN_CONFIG_DIR") or str(Path.home() / ".config" / "harness-run")
    return Path(root) / "server-secret"


def server_secret() -> bytes:
    """The key under which key records are authenticated: ``$HARNESS_RUN_SERVER_SECRET``, else the
    secret file (made with 32 random bytes, 0600 in a 0700 directory, if there is none yet). The
    same secret must be given to ``serve`` and ``serve keys`` (both read the same file by default)."""
    given = os.environ.get(SECRET_ENV)
    if given is not None:
        if len(given) < 32:
            raise UsageError(f"${SECRET_ENV} must be at least 32 characters (e.g. `openssl rand -hex 32`)")
        return given.encode()
    if os.environ.get("K_SERVICE"):  # Cloud Run: each instance would make its own, accepting no key
        raise UsageError(
            f"on Cloud Run the server secret must come from Secret Manager: deploy with --secret "
            f"{SECRET_ENV}=projects/P/secrets/S:latest, and export the same value for `serve keys`"
        )
    path = _secret_file()
    try:
        return bytes.fromhex(path.read_text().strip())
    except FileNotFoundError:
        pass
    except (OSError, ValueError) as exc:
        raise UsageError(
            f"cannot read the server secret {path} ({type(exc).__name__}); fix or remove the file "
            f"(keys made under it stop working), or set ${SECRET_ENV}"
        ) from None
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    value = secrets.token_bytes(32)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        os.write(fd, value.hex().encode())
    finally:
        os.close(fd)
    return value


def _mac(record: ApiKeyRecord, secret: bytes) -> str:
    fields = record.model_dump(mode="json", exclude={"mac"})
    message = json.dumps(fields, sort_keys=True, separators=(",", ":")).encode()
    return hmac.new(secret, message, hashlib.sha256).hexdigest()


def _sealed(record: ApiKeyRecord, secret: bytes) -> ApiKeyRecord:
    return record.model_copy(update={"mac": _mac(record, secret)})


def record_valid(record: ApiKeyRecord, secret: bytes) -> bool:
    """Whether ``record`` was made (or last changed) by ``serve keys`` under ``secret``."""
    return bool(record.mac) and hmac.compare_digest(record.mac, _mac(record, secret))


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
    """A key store whose reads come from memory: the whole key list (``list_api_keys``) is re-read
    at most every ``ttl`` seconds, so a request with a key id that is not in it is refused with no
    store read, however many such requests come. A known key's record is re-read (that one key)
    when older than ``ttl``, so a revoked key stops within ``ttl`` seconds; a new key (made by
    another process) works within ``ttl`` seconds, at once if the list is older. Writes go straight
    through. Thread-safe: call it from worker threads (``asyncio.to_thread``), never on the loop."""

    def __init__(self, store: KeyStore, ttl: float) -> None:
        self.store = store
        self.ttl = ttl
        self._lock = threading.Lock()  # one list refresh at a time
        self._records: dict[str, tuple[float, ApiKeyRecord]] = {}
        self._listed_at: float | None = None  # monotonic time of the last list (None: never)

    def put_api_key(self, record: ApiKeyRecord) -> None:
        self.store.put_api_key(record)
        with self._lock:
            self._records[record.key_id] = (time.monotonic(), record)

    def get_api_key(self, key_id: str) -> ApiKeyRecord | None:
        now = time.monotonic()
        hit = self._records.get(key_id)
        if hit is None:
            self._refresh(now)  # a store read only when the list is older than ttl
            hit = self._records.get(key_id)
            return hit[1] if hit is not None else None
        if now - hit[0] < self.ttl:
            return hit[1]
        record = self.store.get_api_key(key_id)  # a known key's record: revocation within ttl
        with self._lock:
            if record is None:
                self._records.pop(key_id, None)
            else:
                self._records[key_id] = (now, record)
        return record

    def _refresh(self, now: float) -> None:
        """Re-read the key list if the last read began more than ``ttl`` seconds before ``now``
        (callers arriving during a read wait for it and use its answer)."""
        if self._listed_at is not None and now - self._listed_at < self.ttl:
            return
        with self._lock:
            if self._listed_at is not None and time.monotonic() - self._listed_at < self.ttl:
                return  # another thread just read it
            started = self._listed_at = time.monotonic()  # a failing store is not asked again at once
            records = self.store.list_api_keys()
            self._records = {r.key_id: (started, r) for r in records}

    def list_api_keys(self) -> list[ApiKeyRecord]:
        return self.store.list_api_keys()


def _digest(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


def _scopes(scopes: Iterable[str]) -> tuple[KeyScope, ...]:
    known: tuple[KeyScope, ...] = ("read", "turn", "exec", "admin")
    chosen = tuple(dict.fromkeys(scopes)) or ("turn",)
    for scope in chosen:
        if scope not in known:
            raise UsageError(f"--scope {scope!r} is not a scope; use one of {', '.join(known)}")
    return cast("tuple[KeyScope, ...]", chosen)


def create_key(
    store: KeyStore,
    name: str,
    *,
    scopes: Iterable[str] = ("turn",),
    budget_usd: float | None = None,
    budget_per: Literal["day", "month"] | None = None,
    secret: bytes | None = None,
) -> tuple[ApiKeyRecord, str]:
    """A new key named ``name``: its record (stored, sealed under the server secret) and the key
    itself (shown once, never stored). ``scopes``: read, turn (the default), exec, admin.
    ``budget_usd`` per ``budget_per`` (day or month, default month) caps the key's spend."""
    if not name.strip():
        raise UsageError("an API key needs a name (--name), e.g. the person or client using it")
    if budget_usd is not None and not (budget_usd > 0 and budget_usd < float("inf")):
        raise UsageError(f"--budget-usd must be a positive number of dollars, not {budget_usd!r}")
    if budget_per is not None and budget_usd is None:
        raise UsageError("--per needs --budget-usd (e.g. --budget-usd 50 --per month)")
    key_id = secrets.token_hex(4)
    key = f"{_PREFIX}_{key_id}_{secrets.token_urlsafe(24)}"
    record = ApiKeyRecord(
        key_id=key_id,
        name=name.strip(),
        sha256=_digest(key),
        created_at=time.time(),
        scopes=_scopes(scopes),
        budget_usd=budget_usd,
        budget_per=(budget_per or "month") if budget_usd is not None else None,
    )
    record = _sealed(record, secret if secret is not None else server_secret())
    store.put_api_key(record)
    return record, key


def list_keys(store: KeyStore) -> list[ApiKeyRecord]:
    return store.list_api_keys()


def revoke_key(store: KeyStore, key_id: str, *, secret: bytes | None = None) -> ApiKeyRecord:
    """Revoke the key with this id (from ``keys list``); its requests get 401 from now on."""
    for record in store.list_api_keys():
        if record.key_id == key_id:
            if record.revoked_at is None:
                revoked = record.model_copy(update={"revoked_at": time.time()})
                record = _sealed(revoked, secret if secret is not None else server_secret())
                store.put_api_key(record)
            return record
    raise UsageError(f"no API key with id {key_id!r}; list them with `harness-run serve keys list`")


def check_key(store: KeyStore, header: str | None, secret: bytes | None = None) -> ApiKeyRecord | None:
    """The live key record an ``Authorization: Bearer <key>`` header names, else None: a record
    whose seal is not the server's (written by anything but ``serve keys``) is never accepted."""
    scheme, _, key = (header or "").partition(" ")
    if scheme.lower() != "bearer" or not key.startswith(f"{_PREFIX}_"):
        return None
    key_id = key.split("_")[1] if key.count("_") >= 2 else ""
    try:
        digest = _digest(key.strip())
    except UnicodeError:  # a header byte that is not UTF-8 (aiohttp keeps it as a surrogate)
        return None
    if not key_id.isalnum():
        return None
    record = store.get_api_key(key_id)
    # a missing key is compared with a dummy hash: unknown and wrong keys take the same path
    matches = hmac.compare_digest(record.sha256 if record is not None else "0" * 64, digest)
    if record is None or not matches or record.revoked_at is not None:
        return None
    if not record_valid(record, secret if secret is not None else server_secret()):
        return None
    return record
