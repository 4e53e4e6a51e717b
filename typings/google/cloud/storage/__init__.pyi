# Type stubs for the part of google-cloud-storage that harness_run.store uses: the package ships no
# type information (no py.typed). pyright reads these from ./typings, its default stubPath. Extend
# them when the store uses more of the client; keep the signatures those of the pinned version.

from collections.abc import Iterator
from typing import Any

from google.api_core.retry import Retry

__all__ = ["Blob", "Bucket", "Client"]

class Blob:
    name: str
    generation: int | None
    metadata: dict[str, str] | None
    def download_as_bytes(self, *, timeout: float = ..., retry: Retry | None = ...) -> bytes: ...
    def upload_from_string(
        self,
        data: bytes | str,
        content_type: str = ...,
        *,
        if_generation_match: int | None = ...,
        timeout: float = ...,
        retry: Retry | None = ...,
    ) -> None: ...
    def delete(self, *, timeout: float = ..., retry: Retry | None = ...) -> None: ...
    def exists(self, *, timeout: float = ..., retry: Retry | None = ...) -> bool: ...

class Bucket:
    name: str
    def blob(self, blob_name: str) -> Blob: ...
    def exists(self, *, timeout: float = ..., retry: Retry | None = ...) -> bool: ...
    def copy_blob(
        self,
        blob: Blob,
        destination_bucket: Bucket,
        new_name: str | None = ...,
        *,
        if_generation_match: int | None = ...,
        timeout: float = ...,
        retry: Retry | None = ...,
    ) -> Blob: ...

class _BlobPages(Iterator[Blob]):
    prefixes: set[str]
    def __next__(self) -> Blob: ...

class Client:
    def __init__(
        self, project: str | None = ..., credentials: Any = ..., *, client_options: Any = ...
    ) -> None: ...
    def bucket(self, bucket_name: str) -> Bucket: ...
    def list_blobs(
        self,
        bucket_or_name: Bucket | str,
        *,
        prefix: str | None = ...,
        delimiter: str | None = ...,
        timeout: float = ...,
        retry: Retry | None = ...,
    ) -> _BlobPages: ...
    def close(self) -> None: ...
