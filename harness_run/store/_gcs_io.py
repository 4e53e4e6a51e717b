"""The object layer under GcsStore: one bucket, retried requests, errors mapped to StoreError.

``google-cloud-storage`` is imported only when a client is made here.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, TypeVar

from pydantic import BaseModel

from harness_run.errors import StoreError, UsageError
from harness_run.events import AgentEvent
from harness_run.store._common import load_record

if TYPE_CHECKING:
    from google.cloud import storage

__all__ = ["Conflict", "GcsObjects"]

_M = TypeVar("_M", bound=BaseModel)
_T = TypeVar("_T")


class Conflict(Exception):
    """A precondition (``if_generation_match``) failed: the object exists / changed meanwhile."""


class GcsObjects:
    """Objects of ``gs://<bucket>/<prefix>``: read/write/list with retries, parallel reads."""

    def __init__(
        self,
        bucket: str,
        prefix: str = "",
        *,
        project: str | None = None,
        client: storage.Client | None = None,
        retry_timeout: float = 60.0,
        retry_delay: float = 1.0,
        request_timeout: float = 30.0,
        engine: str | None = None,
    ) -> None:
        if not bucket or "/" in bucket:
            raise UsageError(f"{bucket!r} is not a bucket name; pass the bare name, e.g. 'my-bucket'")
        self.bucket_name = bucket
        self.prefix = prefix.strip("/")
        try:
            from google.api_core import exceptions as gexc
            from google.api_core.retry import Retry
            from google.cloud import storage
            from google.cloud.storage.retry import DEFAULT_RETRY
        except ImportError as exc:
            raise UsageError(
                f"the GCS history store needs google-cloud-storage ({exc}); install harness-run[sandbox]"
            ) from None
        self._gexc: Any = gexc
        retry: Retry = DEFAULT_RETRY.with_timeout(retry_timeout).with_delay(initial=retry_delay)
        self._retry = retry
        self._timeout = request_timeout
        self._owns_client = client is None
        if client is None:
            try:
                client = storage.Client(project=project)
            except Exception as exc:
                raise StoreError(
                    f"cannot open gs://{bucket}: no Google credentials ({type(exc).__name__}: {exc}); "
                    "run `gcloud auth application-default login`, use Workload Identity on GKE, or set "
                    "STORAGE_EMULATOR_HOST for an emulator"
                ) from None
        self._client: storage.Client = client
        self._bucket: storage.Bucket = client.bucket(bucket)
        self._pool: ThreadPoolExecutor | None = None
        self._pool_lock = threading.Lock()
        self._indexed: set[str] = set()
        self._written: dict[tuple[str, int], dict[str, list[tuple[int, AgentEvent]]]] = {}
        self._bucket_seen = False
        self._settings = (project, retry_timeout, retry_delay, request_timeout)
        self.engine = engine
        """The engine this store is confined to (its sessions, turns, events and blobs only), or None."""
        self._confined_to: str | None = None
        """The object-name prefix every request must stay under (set by a confined store)."""

    def _confine(self, what: str, name: str) -> None:
        """Refuse a request outside the engine's own folder, before it is sent (defense in depth:
        IAM on the engine's managed folder refuses it too, but only on a real bucket)."""
        if self._confined_to is not None and not name.startswith(self._confined_to):
            raise StoreError(
                f"cannot {what} {self._where(name)}: this history store is confined to engine "
                f"{self.engine!r}'s folder {self._where(self._confined_to)} (the sandbox's identity reaches "
                "only its own engine's sessions); open the store without engine= and with credentials "
                "for the whole bucket to reach anything else"
            )

    def __repr__(self) -> str:
        return f"GcsStore({self.url!r})"

    @property
    def url(self) -> str:
        return f"gs://{self.bucket_name}/{self.prefix}" if self.prefix else f"gs://{self.bucket_name}"

    # --- object primitives ---------------------------------------------------------------------

    def _name(self, *parts: str) -> str:
        return "/".join([self.prefix, *parts]) if self.prefix else "/".join(parts)

    def _where(self, name: str) -> str:
        return f"gs://{self.bucket_name}/{name}"

    def _call(self, what: str, fn: Callable[[], _T]) -> _T:
        """Run one request; 412 -> Conflict, 404 passes through, the rest -> StoreError."""
        gexc = self._gexc
        try:
            return fn()
        except gexc.PreconditionFailed:
            raise Conflict(what) from None
        except gexc.NotFound:
            raise
        except (gexc.Forbidden, gexc.Unauthorized) as exc:
            raise StoreError(
                f"cannot {what}: access denied ({exc.code}); give the caller's identity "
                f"roles/storage.objectAdmin on gs://{self.bucket_name}"
            ) from None
        except gexc.GoogleAPICallError as exc:
            retryable = exc.code is None or exc.code == 429 or exc.code >= 500
            raise StoreError(f"cannot {what}: {exc.code} {exc.message}", retryable=retryable) from None
        except Exception as exc:  # connection errors, timeouts, auth refresh failures
            raise StoreError(
                f"cannot {what}: {type(exc).__name__}: {exc}; is gs://{self.bucket_name} reachable?",
                retryable=True,
            ) from None

    def _read(self, name: str) -> tuple[bytes, int] | None:
        """Content and generation of an object, or None when it does not exist."""
        self._confine("read", name)
        blob = self._bucket.blob(name)
        try:
            data: bytes = self._call(
                f"read {self._where(name)}",
                lambda: blob.download_as_bytes(retry=self._retry, timeout=self._timeout),
            )
        except self._gexc.NotFound:
            if self._missing_bucket():
                raise StoreError(
                    f"bucket gs://{self.bucket_name} does not exist; create it (gcloud storage buckets "
                    "create) or fix the store URL"
                ) from None
            return None
        return data, int(blob.generation or 0)

    def _missing_bucket(self) -> bool:
        """Tell "no such object" from "no such bucket" (checked once; buckets do not come and go)."""
        if self._bucket_seen:
            return False
        try:
            self._bucket_seen = bool(self._bucket.exists(retry=self._retry, timeout=self._timeout))
        except Exception:  # no storage.buckets.get permission: assume it exists
            self._bucket_seen = True
        return not self._bucket_seen

    def _write(
        self,
        name: str,
        data: bytes,
        *,
        generation: int | None,
        metadata: dict[str, str] | None = None,
        content_type: str = "application/json",
    ) -> None:
        """Upload; ``generation`` 0 = create-only, N = replace generation N, None = unconditional."""
        self._confine("write", name)
        blob = self._bucket.blob(name)
        if metadata:
            blob.metadata = metadata

        def upload() -> None:
            blob.upload_from_string(
                data,
                content_type=content_type,
                if_generation_match=generation,
                retry=self._retry,
                timeout=self._timeout,
            )

        try:
            self._call(f"write {self._where(name)}", upload)
        except self._gexc.NotFound:
            raise StoreError(
                f"cannot write {self._where(name)}: bucket gs://{self.bucket_name} does not exist; "
                "create it or fix the store URL"
            ) from None

    def _list(self, prefix: str) -> list[storage.Blob]:
        self._confine("list", prefix)

        def listing() -> list[storage.Blob]:
            return list(
                self._client.list_blobs(self._bucket, prefix=prefix, retry=self._retry, timeout=self._timeout)
            )

        try:
            return self._call(f"list {self._where(prefix)}", listing)
        except self._gexc.NotFound:
            raise StoreError(
                f"bucket gs://{self.bucket_name} does not exist; create it or fix the store URL"
            ) from None

    def _executor(self) -> ThreadPoolExecutor:
        with self._pool_lock:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(max_workers=8, thread_name_prefix="harness-run-gcs")
            return self._pool

    def _map(self, fn: Callable[[str], _T], names: Sequence[str]) -> list[_T]:
        """``fn`` over ``names`` in parallel (requests wait on the network, not on the CPU)."""
        if len(names) <= 1:
            return [fn(n) for n in names]
        return list(self._executor().map(fn, names))

    def _submit(self, fn: Callable[[], None]) -> None:
        """Run ``fn`` in the background; :meth:`close` waits for it."""
        self._executor().submit(fn)

    def _load(self, model: type[_M], data: bytes, name: str) -> _M:
        what = f"the stored {model.__name__} {self._where(name)}"
        return load_record(model, data, what, "restore or delete that object")

    def _get_record(self, model: type[_M], name: str) -> _M | None:
        got = self._read(name)
        return None if got is None else self._load(model, got[0], name)

    def _get_records(self, model: type[_M], names: Sequence[str]) -> list[_M]:
        found = self._map(lambda n: self._get_record(model, n), names)
        return [r for r in found if r is not None]
