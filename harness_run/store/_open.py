"""``open_store(url)``: a history store from a URL (``gs://bucket/prefix``, a path, ``file://path``)."""

from __future__ import annotations

import re
from pathlib import Path
from urllib.parse import unquote, urlsplit

from harness_run.errors import UsageError
from harness_run.store._protocol import HistoryStore

__all__ = ["engine_view", "open_store"]

_BUCKET = re.compile(r"[a-z0-9][a-z0-9._-]{1,220}[a-z0-9]")
_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")
_HOW = (
    "use gs://<bucket>[/<prefix>] for Google Cloud Storage, or a directory path (or file://<path>) "
    "for the local SQLite store"
)


def open_store(
    url: str, *, project: str | None = None, engine: str | None = None, confined: bool = False
) -> HistoryStore:
    """Open the history store at ``url``.

    - ``gs://bucket`` or ``gs://bucket/prefix`` -> :class:`~harness_run.store.GcsStore`
      (google-cloud-storage is imported only then; ``project`` is the client's billing project,
      inferred from the environment when None; ``engine``/``confined``: that engine's view, see
      :class:`~harness_run.store.GcsStore`);
    - ``file:///abs/dir``, ``/abs/dir`` or ``relative/dir`` -> :class:`~harness_run.store.SqliteStore`.
    """
    text = url.strip() if isinstance(url, str) else ""  # pyright: ignore[reportUnnecessaryIsInstance]
    if not text:
        raise UsageError(f"the history store URL is empty; {_HOW}")
    if _SCHEME.match(text):
        parts = urlsplit(text)
        scheme = parts.scheme.lower()
        if scheme == "gs":
            bucket = parts.netloc
            if not _BUCKET.fullmatch(bucket) or ".." in bucket:
                raise UsageError(
                    f"{url!r} has no valid bucket name ({bucket!r}): 3-222 characters of lowercase letters, "
                    f"digits, '-', '_' and '.'; {_HOW}"
                )
            if parts.query or parts.fragment:
                raise UsageError(f"{url!r} has a query or fragment; {_HOW}")
            from harness_run.store.gcs import GcsStore

            return GcsStore(bucket, parts.path.strip("/"), project=project, engine=engine, confined=confined)
        if scheme == "file":
            if parts.netloc not in ("", "localhost"):
                raise UsageError(
                    f"{url!r} names a remote host; file URLs must be local (file:///path); {_HOW}"
                )
            return _sqlite(unquote(parts.path), url)
        raise UsageError(f"unsupported history store URL {url!r} (scheme {scheme!r}); {_HOW}")
    return _sqlite(text, url)


def _sqlite(path: str, url: str) -> HistoryStore:
    if not path:
        raise UsageError(f"{url!r} has no path; {_HOW}")
    from harness_run.store.sqlite import SqliteStore

    return SqliteStore(Path(path).expanduser())


def engine_view(store: HistoryStore, engine: str) -> HistoryStore:
    """The store as one engine's runtime uses it: a GCS store keeps that engine's sessions and blobs
    in its own folder (``GcsStore.for_engine``); any other store is returned as it is."""
    from harness_run.store.gcs import GcsStore

    return store.for_engine(engine) if isinstance(store, GcsStore) else store
