"""One HTTP kit (``harness_run.web``) behind the team server and the in-image worker: the same bad
body gets the same status and the same JSON error body from a real worker process and from a real
``serve`` app — only the pointer to each one's API differs (``see TurnRequest in …``); and the one
SSE client of their clients re-connects by one policy."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any, cast

import pytest
from aiohttp import web
from server._helpers import MODEL, ServerThread, call

from harness_run import AgentSpec
from harness_run.errors import InfrastructureError, SessionNotFoundError
from harness_run.web import follow_events, read_error

from .conftest import TOKEN, WorkerFactory, new_session

pytestmark = pytest.mark.integration

_DEEP = b"[" * 100_000 + b"]" * 100_000
_TOO_LARGE = b" " * (17 * 1024 * 1024)  # over the kit's 16 MiB

# name -> (the worker's body, the server's body): the same fault in each one's TurnRequest
_BAD_BODIES: dict[str, tuple[bytes, bytes]] = {
    "not JSON": (b"{not json", b"{not json"),
    "not UTF-8": (b"\xff\xfe{}", b"\xff\xfe{}"),
    "too large": (_TOO_LARGE, _TOO_LARGE),
    "too deep": (_DEEP, _DEEP),
    "an array": (b"[1, 2]", b"[1, 2]"),
    "a wrong field type": (
        json.dumps({"turn_id": "t1", "session_id": "s1", "prompt": 5}).encode(),
        json.dumps({"prompt": 5}).encode(),
    ),
}
_EXPECTED = {  # status, error code, field
    "not JSON": (422, "invalid", None),
    "not UTF-8": (422, "invalid", None),
    "too large": (413, "too_large", None),
    "too deep": (422, "invalid", None),
    "an array": (422, "invalid", None),
    "a wrong field type": (422, "invalid", "prompt"),
}


def _post(url: str, body: bytes, token: str) -> tuple[int, str, dict[str, Any]]:
    request = urllib.request.Request(
        url,
        data=body,
        method="POST",
        headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(request, timeout=60) as answer:
            status, ctype, raw = answer.status, answer.headers.get("Content-Type", ""), answer.read()
    except urllib.error.HTTPError as exc:
        status, ctype, raw = exc.code, exc.headers.get("Content-Type", ""), exc.read()
    parsed: object = json.loads(raw)
    assert isinstance(parsed, dict), raw[:200]
    return status, ctype, cast("dict[str, Any]", parsed)


def _pointer_off(message: str) -> str:
    """The message without its pointer to the API (``; see TurnRequest in /openapi.json``)."""
    return message.split("; see ", 1)[0]


def test_each_bad_body_gets_the_same_answer_from_the_worker_and_the_server(
    start_worker: WorkerFactory, sqlite_url: str, tmp_path: Path
) -> None:
    worker = start_worker(sqlite_url)
    new_session(sqlite_url)
    server_root = tmp_path / "server"
    server_root.mkdir()
    with ServerThread(server_root, [AgentSpec(name="kit", harness="claude-code", model=MODEL)]) as server:
        status, created = call(f"{server.url}/v1/workspaces", "POST", {}, server.key)
        assert status == 201, created
        turns = f"{server.url}/v1/sessions/{created['session_id']}/turns"

        for name, (to_worker, to_server) in _BAD_BODIES.items():
            from_worker = _post(f"{worker.url}/v1/turns", to_worker, TOKEN)
            from_server = _post(turns, to_server, server.key)
            for status, ctype, body in (from_worker, from_server):
                assert (status, body["error"], body.get("field")) == _EXPECTED[name], (name, body)
                assert ctype.startswith("application/json"), (name, ctype)
                assert set(body) <= {"error", "message", "field", "allow"} and body["message"], (name, body)
            worker_body, server_body = from_worker[2], from_server[2]
            assert set(worker_body) == set(server_body), (name, worker_body, server_body)
            assert _pointer_off(worker_body["message"]) == _pointer_off(server_body["message"]), name
            if status == 422:
                assert worker_body["message"].endswith("see TurnRequest in harness_run.runtime.worker_client")
                assert server_body["message"].endswith("see TurnRequest in /openapi.json")
    assert "Traceback" not in worker.log


async def test_the_one_sse_client_resumes_from_the_last_id_and_gives_up_on_a_server_that_sends_nothing() -> (
    None
):
    """``follow_events`` (both clients' SSE reader) against a real aiohttp server on 127.0.0.1: a
    stream that ends early is re-connected with the last id received; one whose every connection ends
    at once, with nothing sent, is given up after ``reconnect_for``; a refusal is raised at once."""
    seen: list[str | None] = []
    frames = [b'id: 1:0\nevent: user\ndata: {"n": 0}\n\n', b'id: 1:1\nevent: result\ndata: {"n": 1}\n\n']

    async def stream(request: web.Request) -> web.StreamResponse:
        seen.append(request.headers.get("Last-Event-ID"))
        if request.match_info["kind"] == "refused":
            return web.json_response({"error": "not_found", "message": "no such turn"}, status=404)
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        if request.match_info["kind"] == "resumed":  # one event per connection, then the end
            await response.write(b": keepalive\n\n" + frames[len(seen) - 1])
        await response.write_eof()
        return response

    app = web.Application()
    app.router.add_get("/{kind}", stream)
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    base = f"http://127.0.0.1:{runner.addresses[0][1]}"

    def refused(status: int, text: str) -> Exception:
        return SessionNotFoundError(f"{status}: {read_error(text).message}")

    try:
        got: list[tuple[str | None, str, Any]] = []
        async for event in follow_events(f"{base}/resumed", refused=refused, lost="the test stream"):
            got.append((event.id, event.event, json.loads(event.data)))
            if event.event == "result":
                break
        assert got == [("1:0", "user", {"n": 0}), ("1:1", "result", {"n": 1})]
        assert seen == [None, "1:0"]

        seen.clear()
        began = time.monotonic()
        with pytest.raises(
            InfrastructureError, match="lost the test stream and could not re-connect"
        ) as lost:
            async for _ in follow_events(
                f"{base}/empty", refused=refused, lost="the test stream", reconnect_for=0.5
            ):
                pass
        assert lost.value.retryable and 0.5 <= time.monotonic() - began < 5
        assert len(seen) >= 2 and set(seen) == {None}

        seen.clear()
        with pytest.raises(SessionNotFoundError, match="404: no such turn"):
            async for _ in follow_events(f"{base}/refused", refused=refused, lost="the test stream"):
                pass
        assert seen == [None]  # not retried
    finally:
        await runner.cleanup()
