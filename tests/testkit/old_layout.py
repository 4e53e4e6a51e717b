"""Put a session where versions before per-engine history folders kept it (GCS, for tests).

Those versions wrote ``<prefix>/sessions/<id>/…``, ``<prefix>/index/<engine>/<id>`` and
``<prefix>/blobs/<sha256>``; today's store writes ``<prefix>/history/<engine>/…``. Moving a session
written today back (same objects, same bytes and metadata) gives a session of the old layout with
real content: a real turn's events, snapshot and transcript.
"""

from __future__ import annotations

from harness_run.store import GcsStore

__all__ = ["to_old_layout"]


def to_old_layout(store: GcsStore, engine: str, sid: str, *keys: str) -> None:
    """Move session ``sid`` of ``engine`` and the blobs ``keys`` to the old shared layout."""
    from google.cloud import storage

    client = storage.Client()
    bucket = client.bucket(store.bucket_name)
    home = f"{store.prefix}/history/{engine}/"
    blobs = {f"blobs/{k}" for k in keys}
    for blob in list(client.list_blobs(bucket, prefix=home)):
        rest = blob.name[len(home) :]
        if rest == f"index/{sid}":
            target = f"index/{engine}/{sid}"
        elif rest.startswith(f"sessions/{sid}/") or rest in blobs:
            target = rest
        else:
            continue
        bucket.copy_blob(blob, bucket, f"{store.prefix}/{target}")
        blob.delete()
