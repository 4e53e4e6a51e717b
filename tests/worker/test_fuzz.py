"""Bad request bodies against a real worker process on 127.0.0.1: every reply to bad input is a 4xx
JSON ``ErrorBody`` naming the problem (never a 5xx or an HTML page), including deeply nested JSON,
wrong types, huge strings, unknown routes, wrong methods and oversized bodies — fixed cases plus
property-based fuzzing (hypothesis) of the turn, steer and exec bodies. ``exec`` of a command that
leaves a background child finishes when its shell exits."""

from __future__ import annotations

import json
import os
import time
import urllib.error
import urllib.request
from typing import Any, cast

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from .conftest import TOKEN, WorkerFactory, new_session

pytestmark = pytest.mark.integration

_CI = os.environ.get("CI", "").lower() == "true"
FUZZ = settings(
    max_examples=50,
    deadline=None,
    database=None,
    derandomize=_CI,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

_scalars = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=30)
_json = st.recursive(
    _scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12,
)
_huge = st.integers(100_000, 1_000_000).map(lambda n: "x" * n)
_field = _json | _huge | st.dictionaries(st.text(max_size=12), st.text(max_size=12) | _scalars, max_size=3)
_FIELDS = (
    "turn_id",
    "session_id",
    "prompt",
    "secrets",
    "turn_config",
    "turn",
    "text",
    "message_id",
    "command",
    "timeout",
)
_shaped = st.fixed_dictionaries({}, optional={k: _field for k in _FIELDS})
_deep = st.integers(50, 20_000).flatmap(
    lambda n: st.sampled_from(
        [("[" * n + "]" * n), ('{"a":' * n + "1" + "}" * n), ('{"prompt":' + "[" * n + "]" * n + "}")]
    )
)
_bodies = (
    _deep
    | _json.map(json.dumps)
    | _shaped.map(json.dumps)
    | st.binary(max_size=40).map(lambda b: b.decode(errors="replace"))
)


def call(url: str, method: str = "POST", body: bytes | None = None) -> tuple[int, str, dict[str, Any] | None]:
    request = urllib.request.Request(
        url, data=body, method=method, headers={"Authorization": f"Bearer {TOKEN}"}
    )
    try:
        with urllib.request.urlopen(request, timeout=30) as resp:
            status, ctype, data = resp.status, resp.headers.get("Content-Type", ""), resp.read()
    except urllib.error.HTTPError as exc:
        status, ctype, data = exc.code, exc.headers.get("Content-Type", ""), exc.read()
    try:
        parsed = json.loads(data)
    except ValueError:
        parsed = None
    return status, ctype, cast(dict[str, Any], parsed) if isinstance(parsed, dict) else None


def assert_error(reply: tuple[int, str, dict[str, Any] | None], status: int | None = None) -> dict[str, Any]:
    code, ctype, body = reply
    assert 400 <= code < 500, reply
    assert status is None or code == status, reply
    assert ctype.startswith("application/json") and body is not None, reply
    assert isinstance(body.get("error"), str) and isinstance(body.get("message"), str) and body["message"], (
        reply
    )
    return body


def test_bad_requests_get_json_4xx_errors_and_exec_does_not_wait_for_background_children(
    start_worker: WorkerFactory, sqlite_url: str
) -> None:
    worker = start_worker(sqlite_url)
    sid = new_session(sqlite_url)
    routes = [f"{worker.url}/v1/turns", f"{worker.url}/v1/turns/t1/steer", f"{worker.url}/v1/exec"]

    deep = ("[" * 100_000 + "]" * 100_000).encode()
    body = assert_error(call(routes[0], body=deep), 422)
    assert "nests too deeply" in body["message"]
    body = assert_error(
        call(routes[2], body=json.dumps({"session_id": sid, "command": ["ls"]}).encode()), 422
    )
    assert body["field"] == "command"
    assert "not JSON" in assert_error(call(routes[2], body=b"\xff\xfe"), 422)["message"]
    assert "JSON object" in assert_error(call(routes[2], body=b"[1, 2]"), 422)["message"]
    assert assert_error(call(f"{worker.url}/v1/nowhere"), 404)["error"] == "not_found"
    assert assert_error(call(routes[2], method="GET"), 405)["error"] == "method_not_allowed"
    assert assert_error(call(routes[2], body=b" " * (17 * 1024 * 1024)), 413)["error"] == "too_large"

    # a background child keeps the pipes open: the exec still ends when its shell does
    t0 = time.monotonic()
    request = {"session_id": sid, "command": "(sleep 40 &); echo started", "timeout": 20}
    status, _, out = call(routes[2], body=json.dumps(request).encode())
    took = time.monotonic() - t0
    assert status == 200 and out is not None, out
    assert (out["exit_code"], out["stdout"]) == (0, "started\n"), (out, took)

    @FUZZ
    @given(route=st.sampled_from(routes), body=_bodies)
    def fuzz(route: str, body: str) -> None:
        assert_error(call(route, body=body.encode()))

    fuzz()
    assert "Traceback" not in worker.log
