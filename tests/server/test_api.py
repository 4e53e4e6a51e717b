"""The server's HTTP API as a client sees it: keys made with the CLI, 401/404/422 as JSON naming
what to fix, the OpenAPI document; and (real CLI turns) a restart on the same store, SSE replay with
Last-Event-ID through the HarnessBox paths, and a secret that never reaches the store, a log or a
response."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import urllib.error
import urllib.request
import uuid
from pathlib import Path
from typing import Any

import pytest

import harness_run
from harness_run import AgentSpec, Secret
from harness_run.testing import ScriptedModel, shell, text

from ._helpers import MODEL, ServerThread, call, cli

CANARY = "canary-7c1e9f0b2d4a"


def _sse(
    url: str, key: str, body: Any = None, last_id: str | None = None
) -> list[tuple[str, dict[str, Any]]]:
    """(id, event) of an SSE response, up to and including the first result event."""
    headers = {
        "Authorization": f"Bearer {key}",
        "Accept": "text/event-stream",
        "Content-Type": "application/json",
    }
    if last_id is not None:
        headers["Last-Event-ID"] = last_id
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(url, data=data, method="POST" if data else "GET", headers=headers)
    out: list[tuple[str, dict[str, Any]]] = []
    event_id = ""
    with urllib.request.urlopen(request, timeout=60) as answer:
        assert answer.headers["Content-Type"].startswith("text/event-stream")
        for raw in answer:
            line = raw.decode().rstrip("\n")
            if line.startswith("id: "):
                event_id = line[4:]
            elif line.startswith("data: "):
                out.append((event_id, json.loads(line[6:])))
                event_id = ""  # a live text delta has no id of its own
                if out[-1][1]["type"] == "result":
                    return out
    return out


def test_keys_auth_and_errors_are_json_naming_the_fix(tmp_path: Path) -> None:
    made = cli("serve", "keys", "create", "--name", "alice", "--store", str(tmp_path))
    assert made.returncode == 0, made.stderr
    key = made.stdout.split()[-1]
    listed = cli("serve", "keys", "list", "--store", str(tmp_path))
    assert (
        "alice" in listed.stdout
        and key not in listed.stdout
        and key not in (tmp_path / "history.sqlite3").read_text(errors="replace")
    )
    key_id = listed.stdout.split()[0]
    spec = AgentSpec(name="api", harness="claude-code", model=MODEL)
    with ServerThread(tmp_path, [spec]) as server:
        base = server.url
        assert call(f"{base}/healthz")[0] == 200
        status, doc = call(f"{base}/openapi.json")
        assert status == 200 and doc["openapi"].startswith("3.1")
        assert "/v1/workspaces/{session_id}/prompt" in doc["paths"]
        assert "TurnRequest" in doc["components"]["schemas"]

        for wrong in (None, "hrk_0000_wrong", key + "x"):
            status, body = call(f"{base}/v1/sessions", key=wrong)
            assert status == 401 and "harness-run serve keys create" in body["message"]
        assert call(f"{base}/v1/sessions", key=key) == (200, {"sessions": []})

        status, body = call(f"{base}/v1/engines/api/sessions", "POST", {"config": {"max_turns": "many"}}, key)
        assert status == 422 and body["field"] == "max_turns", body
        status, created = call(f"{base}/v1/workspaces", "POST", {}, key)
        assert status == 201 and created["engine"] == "api"
        sid = created["session_id"]
        status, body = call(f"{base}/v1/sessions/{sid}/turns", "POST", {"promt": "typo"}, key)
        assert status == 422 and body["field"] == "prompt", body
        status, body = call(f"{base}/v1/sessions/{sid}/turns", "POST", b"not json", key)
        assert status == 422 and "not JSON" in body["message"]
        missing = str(uuid.uuid4())
        status, body = call(f"{base}/v1/sessions/{missing}", key=key)
        assert status == 404 and missing in body["message"]
        assert call(f"{base}/v1/engines/nope", key=key)[0] == 404
        assert call(f"{base}/v1/nothing-here", key=key)[0] == 404
        assert call(f"{base}/v1/workspaces/{sid}", "DELETE", key=key)[0] == 204
        assert call(f"{base}/v1/sessions/{sid}", key=key)[0] == 404

        revoked = cli("serve", "keys", "revoke", key_id, "--store", str(tmp_path))
        assert revoked.returncode == 0 and "revoked" in revoked.stdout
        assert call(f"{base}/v1/sessions", key=key)[0] == 401


def _serve(store: Path, *specs: Path) -> tuple[subprocess.Popen[str], str]:
    args = [
        sys.executable,
        "-m",
        "harness_run",
        "serve",
        "--store",
        str(store),
        "--port",
        "0",
        "--serve-recorded",
        "--allow-endpoints",
    ]
    for spec in specs:
        args += ["--spec", str(spec)]
    proc = subprocess.Popen(
        args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=os.environ.copy()
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    assert "listening on" in line, proc.stderr.read() if proc.stderr else line
    return proc, line.split()[-1]


def _stop(proc: subprocess.Popen[str]) -> str:
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    return out + err


@pytest.mark.harness
async def test_restart_replay_and_secrets_never_stored_or_logged(
    tmp_path: Path, scripted_model: ScriptedModel
) -> None:
    spec_file = tmp_path / "agent.yaml"
    spec = AgentSpec(name="srv", harness="claude-code", model=MODEL, secrets=[Secret("CANARY")])
    spec_file.write_text(spec.to_yaml())
    store = tmp_path / "store"
    key = cli("serve", "keys", "create", "--name", "ci", "--store", str(store)).stdout.split()[-1]
    scripted_model.add(shell("echo $CANARY"), text(f"the value was {CANARY}"), text("continued"))
    secrets = {"CANARY": CANARY, "ANTHROPIC_BASE_URL": scripted_model.url, "ANTHROPIC_API_KEY": "k"}
    logs = ""
    proc, base = _serve(store, spec_file)
    try:
        _, created = call(f"{base}/v1/workspaces", "POST", {}, key)
        sid = created["session_id"]
        live = _sse(f"{base}/v1/workspaces/{sid}/prompt", key, {"prompt": "show it", "secrets": secrets})
        deltas = [(i, e) for i, e in live if e["type"] == "delta"]  # live only: no id, never replayed
        assert deltas and all(i == "" for i, _ in deltas)
        assert "".join(e["text"] for _, e in deltas) == "the value was ***"
        streamed = [(i, e) for i, e in live if e["type"] != "delta"]
        ids = [i for i, _ in streamed]
        assert ids == [f"1:{n}" for n in range(len(ids))] and streamed[-1][1]["type"] == "result"
        assert streamed[-1][1]["result"]["text"] == "the value was ***"
        # resume after the third event: exactly the rest, once each
        replayed = _sse(f"{base}/v1/workspaces/{sid}/events", key, last_id=ids[2])
        assert [i for i, _ in replayed] == ids[3:]
        assert [e for _, e in replayed] == [e for _, e in streamed[3:]]
        assert [i for i, _ in _sse(f"{base}/v1/sessions/{sid}/events?after=-1", key)] == ids
        bodies = json.dumps([e for _, e in streamed]) + json.dumps(
            call(f"{base}/v1/sessions/{sid}/history", key=key)
        )
    finally:
        logs += _stop(proc)

    proc, base = _serve(store)  # no --spec: the engine recorded in the store is served
    try:
        engine = harness_run.connect(base, api_key=key)
        session = engine.get_session(sid)
        assert session.record.turns == 1
        result = await session.send("go on", secrets=secrets)
        assert result.text == "continued" and session.record.turns == 2
        assert [t.prompt for t in session.history()] == ["show it", "go on"]
        await engine.aclose()
    finally:
        logs += _stop(proc)

    assert CANARY not in bodies + logs
    # the history store (not the agent's own live workspace, where the CLI saw the value)
    for path in [*store.glob("history.sqlite3*"), *store.glob("blobs/**/*")]:
        if path.is_file():
            assert CANARY.encode() not in path.read_bytes(), path
