"""``backend``: each protocol test runs against SqliteStore and GcsStore (on fake-gcs-server)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from harness_run.store import HistoryStore

from ._backends import Backend, sqlite_url


@pytest.fixture(params=["sqlite", pytest.param("gcs", marks=pytest.mark.integration)])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Backend]:
    url = sqlite_url(tmp_path) if request.param == "sqlite" else request.getfixturevalue("gcs_store_url")
    opened = Backend(request.param, url)
    try:
        yield opened
    finally:
        opened.close()


@pytest.fixture
def store(backend: Backend) -> HistoryStore:
    return backend.open()
