"""Typed transport errors from the team-server client (``connect``): a failed HTTP answer raises
``InfrastructureError`` carrying its ``status`` and the body's error ``code``, so callers dispatch on
those instead of the message. The far end here is what sits in front of a real server when it fails —
a gateway answering 502 with HTML, or 503 with a JSON error body — on 127.0.0.1."""

from __future__ import annotations

import asyncio
import pickle
from collections.abc import AsyncIterator

import pytest
from aiohttp import web

from harness_run.errors import InfrastructureError
from harness_run.runtime.server_client import connect
from harness_run.vocab.net import free_port


@pytest.fixture
async def front_end() -> AsyncIterator[str]:
    async def down(request: web.Request) -> web.Response:
        return web.json_response({"error": "unavailable", "message": "draining, retry later"}, status=503)

    async def gateway(request: web.Request) -> web.Response:
        return web.Response(text="<html>Bad Gateway</html>", status=502, content_type="text/html")

    app = web.Application()
    app.router.add_get("/down/v1/engines", down)
    app.router.add_get("/gateway/v1/engines", gateway)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    yield f"http://127.0.0.1:{port}"
    await runner.cleanup()


async def test_a_failed_answer_carries_its_status_and_code(front_end: str) -> None:
    with pytest.raises(InfrastructureError) as down:
        await asyncio.to_thread(connect, f"{front_end}/down", "hrk_key")
    assert (down.value.status, down.value.code) == (503, "unavailable")
    assert "draining, retry later" in str(down.value) and "hrk_key" not in str(down.value)
    copy = pickle.loads(pickle.dumps(down.value))
    assert (type(copy), copy.status, copy.code, str(copy)) == (
        InfrastructureError,
        503,
        "unavailable",
        str(down.value),
    )

    with pytest.raises(InfrastructureError) as gateway:
        await asyncio.to_thread(connect, f"{front_end}/gateway", "hrk_key")
    assert (gateway.value.status, gateway.value.code) == (502, None)  # no JSON body: no code

    with pytest.raises(InfrastructureError) as unreachable:  # no answer at all: no status either
        await asyncio.to_thread(connect, f"http://127.0.0.1:{free_port()}", "hrk_key")
    assert (unreachable.value.status, unreachable.value.code, unreachable.value.retryable) == (
        None,
        None,
        True,
    )
