"""``harness_run.testing._gcs.FakeGcsServer``: the fake-gcs-server binary on 127.0.0.1, stopped by PID."""

from __future__ import annotations

import json
import os
import urllib.request
from pathlib import Path

import pytest

from harness_run.errors import InfrastructureError
from harness_run.testing._gcs import FakeGcsServer, fake_gcs_binary

pytestmark = pytest.mark.integration


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


def test_the_server_starts_on_a_free_loopback_port_and_stops_by_pid() -> None:
    assert os.access(fake_gcs_binary(), os.X_OK)
    with FakeGcsServer() as server:
        assert server.url.startswith("http://127.0.0.1:")
        assert server.env == {"STORAGE_EMULATOR_HOST": server.url}
        assert server.create_bucket("one") == "one"
        server.create_bucket("one")  # already there: fine
        with urllib.request.urlopen(f"{server.url}/storage/v1/b", timeout=5) as resp:
            names = [b["name"] for b in json.load(resp).get("items", [])]
        assert names == ["one"]
        pid = server.pid
        assert pid is not None and _alive(pid)
    assert not _alive(pid)
    assert server.pid is None
    server.stop()  # twice is fine


def test_a_binary_that_does_not_start_gives_a_clear_error(tmp_path: Path) -> None:
    broken = tmp_path / "fake-gcs-server"
    broken.write_text("#!/bin/sh\necho 'cannot bind' >&2\nexit 3\n")
    broken.chmod(0o755)
    with pytest.raises(InfrastructureError, match=r"fake-gcs-server exited at start.*cannot bind"):
        FakeGcsServer(binary=broken).start()


def test_the_session_fixture_points_google_clients_at_it(fake_gcs: FakeGcsServer, gcs_store_url: str) -> None:
    assert os.environ["STORAGE_EMULATOR_HOST"] == fake_gcs.url
    assert gcs_store_url.startswith("gs://hr-") and gcs_store_url.endswith("/hr")


def test_a_bad_bucket_name_is_refused_with_the_rule(fake_gcs: FakeGcsServer) -> None:
    with pytest.raises(InfrastructureError, match=r"refused bucket 'b': HTTP 400.*3-63 characters"):
        fake_gcs.create_bucket("b")
