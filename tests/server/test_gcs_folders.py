"""A team server whose account reaches only its own folders of the bucket (managed-folder grants:
``keys/``, ``engines/``, ``history/<served engine>/``), as ``harness-run-gcp-setup`` grants it.

fake-gcs-server has no IAM, so a relay in front of it answers 403 — GCS's own error body — to
every object request outside those folders, and records them. A real ``harness-run serve`` process
on that relay serves a real turn, lists, reads and deletes a session with no request refused."""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import subprocess
import sys
import threading
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp import ClientSession, web

from harness_run import AgentSpec
from harness_run.testing import ScriptedModel, shell, text

from ._helpers import MODEL, call, cli

pytestmark = pytest.mark.integration

_OBJECT = re.compile(
    r"^(?:/download|/upload)?/storage/v1/b/([^/]+)/o(?:/([^?]+?))?(?:/(?:rewriteTo|copyTo)/b/[^/]+/o/(.+))?$"
)


class FolderRelay:
    """Forwards to fake GCS; refuses objects outside ``allowed`` name prefixes with a 403."""

    def __init__(self, upstream: str, allowed: list[str]) -> None:
        self.upstream = upstream
        self.allowed = allowed
        self.refused: list[str] = []
        self.seen: list[str] = []
        self.url = ""

    def _names(self, request: web.Request, body: bytes) -> list[str]:
        match = _OBJECT.match(request.rel_url.raw_path)
        if match is None:
            return []  # the bucket itself
        names = [urllib.parse.unquote(n) for n in match.groups()[1:] if n]
        if match.group(2) is None:  # a listing or an upload: the prefix, or the new object's name
            query = request.rel_url.query
            if "prefix" in query:
                names.append(query["prefix"])
            elif "name" in query:
                names.append(query["name"])
            else:
                found = re.search(rb'"name"\s*:\s*"([^"]+)"', body)
                names.append(found.group(1).decode() if found else "")
        return names

    async def handle(self, request: web.Request) -> web.StreamResponse:
        body = await request.read()
        names = self._names(request, body)
        self.seen.extend(names)
        outside = [n for n in names if not any(n.startswith(p) for p in self.allowed)]
        if outside:
            self.refused.extend(f"{request.method} {n}" for n in outside)
            error = {"error": {"code": 403, "message": f"no access to {outside[0]}", "errors": []}}
            return web.json_response(error, status=403)
        headers = {k: v for k, v in request.headers.items() if k.lower() not in {"host", "content-length"}}
        async with ClientSession(auto_decompress=False) as http:
            async with http.request(
                request.method, self.upstream + str(request.rel_url), data=body, headers=headers
            ) as answer:
                data = await answer.read()
                drop = {"content-length", "transfer-encoding", "content-encoding", "connection"}
                kept = {k: v for k, v in answer.headers.items() if k.lower() not in drop}
                return web.Response(body=data, status=answer.status, headers=kept)


@pytest.fixture
def relay(fake_gcs: Any) -> Iterator[FolderRelay]:
    folder_relay = FolderRelay(fake_gcs.url, ["hr/keys/", "hr/engines/", "hr/history/served/"])
    app = web.Application(client_max_size=64 * 1024 * 1024)
    app.router.add_route("*", "/{tail:.*}", folder_relay.handle)
    loop = asyncio.new_event_loop()
    runner = web.AppRunner(app, access_log=None)
    loop.run_until_complete(runner.setup())
    loop.run_until_complete(web.TCPSite(runner, "127.0.0.1", 0).start())
    folder_relay.url = f"http://127.0.0.1:{runner.addresses[0][1]}"
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    try:
        yield folder_relay
    finally:
        asyncio.run_coroutine_threadsafe(runner.cleanup(), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        loop.close()


@pytest.mark.harness
def test_a_server_needs_only_its_own_folders(
    tmp_path: Path, gcs_store_url: str, relay: FolderRelay, scripted_model: ScriptedModel
) -> None:
    spec_file = tmp_path / "served.yaml"
    spec = AgentSpec(name="served", harness="claude-code", model=MODEL, model_base_url=scripted_model.url)
    spec_file.write_text(spec.to_yaml())
    env = {**os.environ, "STORAGE_EMULATOR_HOST": relay.url, "HARNESS_RUN_HOME": str(tmp_path / "home")}
    made = cli("serve", "keys", "create", "--name", "team", "--store", gcs_store_url, env=env)
    assert made.returncode == 0, made.stderr
    key = made.stdout.split()[-1]
    scripted_model.add(shell("echo folder > f.txt"), text("done"))
    args = [sys.executable, "-m", "harness_run", "serve", "--store", gcs_store_url, "--port", "0"]
    proc = subprocess.Popen(
        [*args, "--spec", str(spec_file)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert "listening on" in line, proc.stderr.read() if proc.stderr else line
        base = line.split()[-1]
        status, created = call(f"{base}/v1/workspaces", "POST", {}, key)
        assert status == 201, created
        sid = created["session_id"]
        request = urllib.request.Request(
            f"{base}/v1/sessions/{sid}/turns",
            data=json.dumps({"prompt": "work", "secrets": {"ANTHROPIC_API_KEY": "k"}}).encode(),
            method="POST",
            headers={"Authorization": f"Bearer {key}", "Accept": "text/event-stream"},
        )
        with urllib.request.urlopen(request, timeout=90) as answer:
            streamed = answer.read().decode()
        assert '"type":"result"' in streamed.replace(" ", "") and "done" in streamed
        assert call(f"{base}/v1/sessions", key=key)[1]["sessions"][0]["session_id"] == sid
        assert len(call(f"{base}/v1/sessions/{sid}/history", key=key)[1]["turns"]) == 1
        assert call(f"{base}/v1/sessions/{sid}/events?format=json", key=key)[0] == 200
        assert call(f"{base}/v1/sessions/{sid}", "DELETE", key=key)[0] == 204
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=30)
    assert relay.refused == [], relay.refused
    assert any(n.startswith("hr/history/served/") for n in relay.seen), "the turn went through the relay"
    assert "Traceback" not in err
