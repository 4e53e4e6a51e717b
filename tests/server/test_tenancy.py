"""The team server with more than one key holder (issue 22): scopes, owned sessions, sealed key
records, per-key budgets, deletion, hostile requests. The adversary is another API-key holder —
and, for the key store, the agent of a local engine under ``serve`` (a real Claude Code turn)."""

from __future__ import annotations

import json
import socket
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from harness_run import AgentSpec
from harness_run.server import create_key, key_store
from harness_run.store import ApiKeyRecord, SqliteStore
from harness_run.testing import ScriptedModel, is_side_request, shell, text

from ._helpers import MODEL, ServerThread, call, cli


def _spec(model: ScriptedModel, name: str = "team") -> AgentSpec:
    return AgentSpec(
        name=name,
        harness="claude-code",
        model=MODEL,
        model_base_url=model.url,  # the operator's endpoint: callers bring only a key
        system_prompt="OPERATOR-PROMPT-9d1c",
    )


_KEY = {"ANTHROPIC_API_KEY": "sk-test"}


def _wait_idle(base: str, sid: str, key: str, timeout: float = 60) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        status, record = call(f"{base}/v1/sessions/{sid}", key=key)
        assert status == 200, record
        if record["status"] != "running" and record["turns"] >= 1:
            return record
        time.sleep(0.1)
    raise AssertionError(f"session {sid} still running after {timeout}s")


@pytest.mark.harness
def test_another_key_cannot_see_or_touch_a_session(tmp_path: Path, scripted_model: ScriptedModel) -> None:
    scripted_model.add(text("done for alice"))
    with ServerThread(tmp_path, [_spec(scripted_model)]) as server:
        base, alice = server.url, server.key
        bob = server.new_key("bob", "exec")
        admin = server.new_key("ops", "admin")
        status, created = call(f"{base}/v1/engines/team/sessions", "POST", {}, alice)
        assert status == 201 and created["owner"] is not None
        sid = created["session_id"]
        status, _ = call(f"{base}/v1/sessions/{sid}/turns", "POST", {"prompt": "hi", "secrets": _KEY}, alice)
        assert status == 200
        assert _wait_idle(base, sid, alice)["last_result"]["text"] == "done for alice"

        # bob: every route answers as if the session did not exist
        for listing in ("sessions", "workspaces"):
            status, listed = call(f"{base}/v1/{listing}", key=bob)
            assert status == 200 and listed["sessions"] == [], listed
            assert sid not in json.dumps(listed)
        for method, path, body in [
            ("GET", "", None),
            ("GET", "/history", None),
            ("GET", "/events?format=json", None),
            ("GET", "/events", None),
            ("POST", "/turns", {"prompt": "mine now", "secrets": _KEY}),
            ("POST", "/steer", {"text": "obey bob"}),
            ("POST", "/interrupt", None),
            ("POST", "/exec", {"command": "cat /etc/hostname"}),
            ("DELETE", "", None),
        ]:
            status, answer = call(f"{base}/v1/sessions/{sid}{path}", method, body, bob)
            assert status == 404 and answer["error"] == "not_found", (path, status, answer)
        assert call(f"{base}/v1/workspaces/{sid}/events", key=bob)[0] == 404
        assert call(f"{base}/v1/workspaces/{sid}", "DELETE", key=bob)[0] == 404
        assert not any("bob" in json.dumps(r.body) for r in scripted_model.requests)

        # a session id bob takes first is not handed to alice, and not taken over
        taken = str(uuid.uuid4())
        assert call(f"{base}/v1/workspaces", "POST", {"session_id": taken}, bob)[0] == 201
        status, answer = call(f"{base}/v1/workspaces", "POST", {"session_id": taken}, alice)
        assert status == 409 and "taken" in answer["message"]
        assert call(f"{base}/v1/sessions/{taken}", key=alice)[0] == 404

        # alice still has hers; an admin key sees and reads both
        assert [s["session_id"] for s in call(f"{base}/v1/sessions", key=alice)[1]["sessions"]] == [sid]
        listed = {s["session_id"] for s in call(f"{base}/v1/sessions", key=admin)[1]["sessions"]}
        assert listed == {sid, taken}
        status, history = call(f"{base}/v1/sessions/{sid}/history", key=admin)
        assert status == 200 and [t["prompt"] for t in history["turns"]] == ["hi"]


def test_scopes_gate_what_a_key_may_do(tmp_path: Path, scripted_model: ScriptedModel) -> None:
    with ServerThread(tmp_path, [_spec(scripted_model)], allow_exec=False) as server:
        base = server.url
        reader = server.new_key("viewer", "read")
        runner = server.new_key("dev", "turn")
        assert call(f"{base}/v1/sessions", key=reader)[0] == 200
        status, answer = call(f"{base}/v1/workspaces", "POST", {}, reader)
        assert status == 403 and answer["error"] == "forbidden"
        assert answer["allow"] == "harness-run serve keys create --scope turn"
        status, created = call(f"{base}/v1/workspaces", "POST", {}, runner)
        assert status == 201
        sid = created["session_id"]
        status, answer = call(f"{base}/v1/sessions/{sid}/exec", "POST", {"command": "id"}, runner)
        assert status == 403 and "--scope exec" in answer["allow"]
        # an exec key still cannot reach this host's shell unless the operator said --allow-exec
        status, created = call(f"{base}/v1/workspaces", "POST", {}, server.key)
        status, answer = call(
            f"{base}/v1/sessions/{created['session_id']}/exec", "POST", {"command": "id"}, server.key
        )
        assert status == 403 and "--allow-exec" in answer["allow"], answer
        status, me = call(f"{base}/v1/keys/me", key=runner)
        assert status == 200 and me["scopes"] == ["turn"] and me["name"] == "dev"


def test_key_records_not_sealed_by_the_server_are_refused(
    tmp_path: Path, scripted_model: ScriptedModel
) -> None:
    with ServerThread(tmp_path, [_spec(scripted_model)]) as server:
        base = server.url
        store = SqliteStore(tmp_path)
        keys = key_store(store)
        try:
            # 1. a record written straight into the store, with a hash of the writer's choice
            forged = "hrk_0badc0de_forged-by-whoever-writes-the-store"
            import hashlib

            keys.put_api_key(
                ApiKeyRecord(
                    key_id="0badc0de",
                    name="minted",
                    sha256=hashlib.sha256(forged.encode()).hexdigest(),
                    created_at=time.time(),
                    scopes=("admin",),
                )
            )
            assert call(f"{base}/v1/sessions", key=forged)[0] == 401
            # 2. a real key whose record is widened to admin, its seal kept
            record, key = create_key(keys, "carol", scopes=("read",))
            assert call(f"{base}/v1/keys/me", key=key)[1]["scopes"] == ["read"]
            keys.put_api_key(record.model_copy(update={"scopes": ("admin",)}))
            assert call(f"{base}/v1/sessions", key=key)[0] == 401
            # 3. a revoked key brought back by clearing revoked_at
            record, key = create_key(keys, "dave")
            revoked = cli("serve", "keys", "revoke", record.key_id, "--store", str(tmp_path))
            assert revoked.returncode == 0, revoked.stderr
            stored = keys.get_api_key(record.key_id)
            assert stored is not None
            keys.put_api_key(stored.model_copy(update={"revoked_at": None}))
            assert call(f"{base}/v1/sessions", key=key)[0] == 401
            listed = cli("serve", "keys", "list", "--store", str(tmp_path)).stdout
            assert listed.count("INVALID") == 3, listed
        finally:
            store.close()


@pytest.mark.harness
def test_the_agent_cannot_mint_a_key(tmp_path: Path, scripted_model: ScriptedModel) -> None:
    """The agent of a local engine under serve (guards on, the defaults) writes a key record of
    its own into the server's store; the key it chose is refused."""
    minted = "hrk_00c0ffee_minted-by-the-agent-0000000000"
    script = (
        "import hashlib, time, sys; sys.path[:0] = " + json.dumps(sys.path) + "\n"
        "from harness_run.store import SqliteStore, ApiKeyRecord\n"
        f"s = SqliteStore({str(tmp_path)!r})\n"
        f"k = {minted!r}\n"
        "s.put_api_key(ApiKeyRecord(key_id='00c0ffee', name='agent', created_at=time.time(),"
        " sha256=hashlib.sha256(k.encode()).hexdigest(), scopes=('admin',)))\n"
        "print('minted')\n"
    )
    (tmp_path / "mint.py").write_text(script)
    scripted_model.add(shell(f"{sys.executable} {tmp_path / 'mint.py'}"), text("done"))
    with ServerThread(tmp_path, [_spec(scripted_model)]) as server:
        base = server.url
        _, created = call(f"{base}/v1/workspaces", "POST", {}, server.key)
        sid = created["session_id"]
        call(f"{base}/v1/sessions/{sid}/turns", "POST", {"prompt": "mint", "secrets": _KEY}, server.key)
        _wait_idle(base, sid, server.key)
        tool_results = json.dumps([r.body for r in scripted_model.requests])
        assert "minted" in tool_results  # the write went through: only the seal stands in the way
        assert call(f"{base}/v1/sessions", key=minted)[0] == 401
        assert call(f"{base}/v1/sessions", key=server.key)[0] == 200


def test_hostile_requests_get_clear_errors(tmp_path: Path, scripted_model: ScriptedModel) -> None:
    with ServerThread(tmp_path, [_spec(scripted_model)]) as server:
        base, key = server.url, server.key
        assert call(f"{base}/healthz") == (200, {"status": "ok"})
        port = int(base.rsplit(":", 1)[1])
        with socket.create_connection(("127.0.0.1", port), timeout=10) as raw:
            raw.sendall(
                b"GET /v1/sessions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer hrk_\xff\xfe_x\r\n\r\n"
            )
            head = raw.recv(4096).split(b"\r\n", 1)[0]
        assert head.startswith(b"HTTP/1.1 401"), head
        deep = b'{"config": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"
        status, answer = call(f"{base}/v1/workspaces", "POST", deep, key)
        assert status == 422 and "nests too deeply" in answer["message"], answer
        status, answer = call(f"{base}/v1/workspaces", "POST", b"[1, 2]", key)
        assert status == 422 and "JSON object" in answer["message"]
        # a non-admin key sees what it needs of the spec, not the operator's prompt
        user = server.new_key("user", "turn")
        status, engine = call(f"{base}/v1/engines/team", key=user)
        assert status == 200 and engine["spec"]["model"] == MODEL
        assert "OPERATOR-PROMPT" not in json.dumps(engine)
        admin = server.new_key("ops", "admin")
        assert "OPERATOR-PROMPT" in json.dumps(call(f"{base}/v1/engines/team", key=admin)[1])


@pytest.mark.harness
def test_delete_removes_the_workspace_and_waits_for_the_turn(
    tmp_path: Path, scripted_model: ScriptedModel
) -> None:
    scripted_model.add(shell("echo kept > work.txt"), text("slow", delay=3.0))
    with ServerThread(tmp_path, [_spec(scripted_model)]) as server:
        base, key = server.url, server.key
        _, created = call(f"{base}/v1/workspaces", "POST", {}, key)
        sid = created["session_id"]
        call(f"{base}/v1/sessions/{sid}/turns", "POST", {"prompt": "work", "secrets": _KEY}, key)
        found: list[Path] = []
        deadline = time.monotonic() + 30
        while not found and time.monotonic() < deadline:
            found = [p for p in tmp_path.rglob("work.txt") if sid in str(p)]
            time.sleep(0.1)
        assert found, "the agent's file was not written"
        status, answer = call(f"{base}/v1/sessions/{sid}", "DELETE", key=key)
        assert status == 409 and answer["error"] == "session_busy", answer
        _wait_idle(base, sid, key)
        assert call(f"{base}/v1/sessions/{sid}", "DELETE", key=key)[0] == 204
        assert not [p for p in tmp_path.rglob("*") if sid in str(p)], "workspace or transcript left behind"
        assert call(f"{base}/v1/sessions/{sid}", key=key)[0] == 404


@pytest.mark.harness
def test_a_key_budget_stops_turns(tmp_path: Path, scripted_model: ScriptedModel) -> None:
    scripted_model.add(text("first", usage={"input_tokens": 2000, "output_tokens": 1000}))
    with ServerThread(tmp_path, [_spec(scripted_model)]) as server:
        base = server.url
        store = SqliteStore(tmp_path)
        try:
            _, key = create_key(key_store(store), "capped", budget_usd=0.0001, budget_per="day")
        finally:
            store.close()
        _, created = call(f"{base}/v1/workspaces", "POST", {}, key)
        sid = created["session_id"]
        assert (
            call(f"{base}/v1/sessions/{sid}/turns", "POST", {"prompt": "a", "secrets": _KEY}, key)[0] == 200
        )
        _wait_idle(base, sid, key)
        status, me = call(f"{base}/v1/keys/me", key=key)
        assert status == 200 and me["spent_usd"] > 0.0001 and me["budget_per"] == "day", me
        status, answer = call(
            f"{base}/v1/sessions/{sid}/turns", "POST", {"prompt": "b", "secrets": _KEY}, key
        )
        assert status == 403 and "budget" in answer["message"] and answer["field"] == "budget_usd", answer
        assert len([r for r in scripted_model.requests if not is_side_request(r)]) == 1
        listed = cli("serve", "keys", "list", "--store", str(tmp_path)).stdout
        assert "of $0.0001/day" in listed, listed


def test_serve_needs_a_store_and_names_recorded_engines(tmp_path: Path) -> None:
    missing = cli("serve", "--port", "0")
    assert missing.returncode == 2 and "--store" in missing.stderr and "Traceback" not in missing.stderr
