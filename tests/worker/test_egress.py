"""The worker's own egress proxy (the pod path: no host proxy, ``network`` not open): the agent's
HTTP clients get ``HTTPS_PROXY`` naming it, the spec's allowed host answers through it, the canary
is refused with a 403 naming the setting and never reached through it. (In a pod, the
NetworkPolicies stop what ignores the proxy; this test runs the worker on the host, so only the
proxy path is asserted here — the container runtime's red-team test covers direct connections.)"""

from __future__ import annotations

import uuid

import pytest
from testkit.listeners import ALLOWED_BODY, allowed_server, canary_listener

from harness_run import AgentSpec
from harness_run.runtime.worker_client import TurnRequest, WorkerClient
from harness_run.testing import ScriptedModel, shell, text

from .conftest import SPEC, TOKEN, WorkerFactory, model_secrets, new_session

pytestmark = [pytest.mark.harness, pytest.mark.integration]


async def test_the_agent_goes_out_through_the_workers_egress_proxy(
    start_worker: WorkerFactory, sqlite_url: str, model: ScriptedModel
) -> None:
    with canary_listener() as canary, allowed_server() as allowed:
        spec = AgentSpec(**{**SPEC.to_dict(), "network": [f"127.0.0.1:{allowed}"]})
        worker = start_worker(sqlite_url, spec=spec)
        sid = new_session(sqlite_url, spec)
        model.add(
            shell('echo "proxy=$HTTPS_PROXY"'),
            shell(f"curl -s -m 10 --noproxy '' http://127.0.0.1:{canary.port}/; echo rc=$?"),
            shell(f"curl -s -m 10 -p --noproxy '' http://127.0.0.1:{canary.port}/; echo rc=$?"),
            shell(f"curl -s -m 10 --noproxy '' http://127.0.0.1:{allowed}/; echo rc=$?"),
            text("done"),
        )
        request = TurnRequest(
            turn_id=uuid.uuid4().hex, session_id=sid, prompt="go out", secrets=model_secrets(model)
        )
        async with WorkerClient(worker.url, TOKEN) as client:
            info = await client.start_turn(request)
            events = [e async for e in client.events(info.turn_id)]
        assert events[-1]["type"] == "result" and not events[-1]["result"]["is_error"], events[-1]
        shown, through, tunnel, ok = model.requests[-1].tool_results
        assert shown.strip().startswith("proxy=http://127.0.0.1:"), shown
        assert "network.allow_hosts" in through, through
        assert "rc=56" in tunnel, tunnel  # CONNECT refused with 403
        assert ALLOWED_BODY in ok, ok
        assert canary.hits == 0
    assert "egress allowlist" in worker.log
