"""``harness-run serve`` on a GCS store (fake-gcs-server): API keys made, listed and revoked with the CLI
on ``gs://``, and two real server processes (separate workdirs, as two Cloud Run instances) on one
bucket seeing the same keys and sessions: a turn on one, the next turn on the other."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from harness_run import AgentSpec
from harness_run.store import GcsStore, open_store
from harness_run.testing import ScriptedModel, shell, text

from ._helpers import MODEL, call, cli

pytestmark = pytest.mark.integration


def _serve(store: str, home: Path, *specs: Path) -> tuple[subprocess.Popen[str], str]:
    args = [
        sys.executable,
        "-m",
        "harness_run",
        "serve",
        "--store",
        store,
        "--port",
        "0",
        "--allow-endpoints",
    ]
    for spec in specs:
        args += ["--spec", str(spec)]
    env = {**os.environ, "HARNESS_RUN_HOME": str(home)}  # its own workspaces: another machine
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    assert proc.stdout is not None
    line = proc.stdout.readline()
    assert "listening on" in line, proc.stderr.read() if proc.stderr else line
    return proc, line.split()[-1]


def _stop(proc: subprocess.Popen[str]) -> str:
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    return out + err


def test_keys_cli_on_a_gcs_store_keeps_hashes_only(gcs_store_url: str) -> None:
    made = cli("serve", "keys", "create", "--name", "alice", "--store", gcs_store_url)
    assert made.returncode == 0, made.stderr
    key = made.stdout.split()[-1]
    assert key.startswith("hrk_")
    listed = cli("serve", "keys", "list", "--store", gcs_store_url)
    assert listed.returncode == 0, listed.stderr
    key_id = listed.stdout.split()[0]
    assert "alice" in listed.stdout and "active" in listed.stdout and key not in listed.stdout

    store = open_store(gcs_store_url)
    try:
        assert isinstance(store, GcsStore)
        bucket = store._bucket  # pyright: ignore[reportPrivateUsage]
        objects = {b.name: b.download_as_bytes() for b in bucket.list_blobs(prefix="hr/keys/")}
        assert list(objects) == [f"hr/keys/{key_id}.json"]
        assert key.encode() not in b"".join(objects.values())
        secret_part = key.split("_", 2)[2]
        assert secret_part.encode() not in b"".join(objects.values())
    finally:
        store.close()

    revoked = cli("serve", "keys", "revoke", key_id, "--store", gcs_store_url)
    assert revoked.returncode == 0 and f"revoked API key {key_id}" in revoked.stdout
    assert "revoked" in cli("serve", "keys", "list", "--store", gcs_store_url).stdout
    unknown = cli("serve", "keys", "revoke", "ffffffff", "--store", gcs_store_url)
    assert unknown.returncode != 0 and "no API key with id 'ffffffff'" in unknown.stderr
    assert "Traceback" not in unknown.stderr


@pytest.mark.harness
async def test_two_servers_on_one_gcs_store_share_keys_and_sessions(
    tmp_path: Path, gcs_store_url: str, scripted_model: ScriptedModel
) -> None:
    spec_file = tmp_path / "agent.yaml"
    spec_file.write_text(
        AgentSpec(name="shared", harness="claude-code", model=MODEL, checkpoint=True).to_yaml()
    )
    key = cli("serve", "keys", "create", "--name", "team", "--store", gcs_store_url).stdout.split()[-1]
    scripted_model.add(
        shell("echo first > note.txt"), text("wrote it"), shell("cat note.txt"), text("read it")
    )
    secrets = {"ANTHROPIC_BASE_URL": scripted_model.url, "ANTHROPIC_API_KEY": "k"}
    logs = ""
    a, url_a = _serve(gcs_store_url, tmp_path / "home-a", spec_file)
    b, url_b = _serve(gcs_store_url, tmp_path / "home-b", spec_file)
    try:
        assert call(f"{url_b}/v1/sessions", key="hrk_00000000_wrong")[0] == 401
        status, created = call(f"{url_a}/v1/workspaces", "POST", {}, key)
        assert status == 201, created
        sid = created["session_id"]
        status, seen = call(f"{url_b}/v1/sessions/{sid}", key=key)
        assert status == 200 and seen["engine"] == "shared"

        import harness_run

        engine_a = harness_run.connect(url_a, api_key=key)
        first = await engine_a.get_session(sid).send("write the note", secrets=secrets)
        assert first.text == "wrote it"
        await engine_a.aclose()

        engine_b = harness_run.connect(url_b, api_key=key)
        session_b = engine_b.get_session(sid)
        assert session_b.record.turns == 1
        second = await session_b.send("read the note", secrets=secrets)  # restored from the checkpoint
        assert second.text == "read it"
        from harness_run.events import ToolResultEvent

        outputs = [e.content for e in session_b.events() if isinstance(e, ToolResultEvent)]
        assert any("first" in o for o in outputs), outputs  # the workspace of server A
        await engine_b.aclose()

        status, history = call(f"{url_a}/v1/sessions/{sid}/history", key=key)
        assert status == 200 and [t["prompt"] for t in history["turns"]] == [
            "write the note",
            "read the note",
        ]

        key_id = key.split("_")[1]
        assert cli("serve", "keys", "revoke", key_id, "--store", gcs_store_url).returncode == 0
        # both servers re-read a key's record at most every KEY_CACHE_SECONDS (5 s)
        deadline = time.monotonic() + 15
        statuses: list[int] = []
        while time.monotonic() < deadline:
            statuses = [call(f"{url}/v1/sessions", key=key)[0] for url in (url_a, url_b)]
            if statuses == [401, 401]:
                break
            await asyncio.sleep(0.5)
        assert statuses == [401, 401]
    finally:
        logs += _stop(a)
        logs += _stop(b)
    assert key not in logs


def test_cached_keys_see_a_revocation_after_the_ttl_and_their_own_writes_at_once(gcs_store_url: str) -> None:
    from harness_run.server import CachedKeys, check_key, create_key, key_store, revoke_key

    store = open_store(gcs_store_url)
    try:
        direct = key_store(store)
        # a ttl of 0.5 s was shorter than a revoke's two bucket calls on a loaded machine: the check
        # "within the ttl" then read the bucket. 2 s leaves room; the expiry is polled, not slept
        cached = CachedKeys(direct, ttl=2.0)
        record, key = create_key(direct, "ci")
        assert check_key(cached, f"Bearer {key}") == record
        revoke_key(direct, record.key_id)  # another process revokes it
        assert check_key(cached, f"Bearer {key}") == record, "served from the cache within the ttl"
        deadline = time.monotonic() + 30
        while check_key(cached, f"Bearer {key}") is not None:
            assert time.monotonic() < deadline, "the revocation was never seen after the ttl"
            time.sleep(0.1)
        again, key2 = create_key(cached, "ops")
        revoke_key(cached, again.key_id)  # written through this cache: seen at once
        assert check_key(cached, f"Bearer {key2}") is None
    finally:
        store.close()
