"""One trace of a turn on the test cluster: the client's turn (``sandbox.get_engine`` → a claim on
the warm pool) sends ``traceparent`` to the worker in a real container of an image built with
``ImageOptions(telemetry=True)``; the worker exports its spans over OTLP/HTTP (configured by
``OTEL_*`` in ``PodOptions.env``) to a collector on 127.0.0.1. The client's turn, claim, the
worker's request, its turn, the harness and the tool call share one trace id; no secret in any span.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from testkit.otel import OtlpReceiver, in_memory

from harness_run import AgentSpec, Secret

from .conftest import CANARY, LOCATION, MODEL, PROJECT, Deployed

pytestmark = [pytest.mark.docker, pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(900)]


async def test_a_sandbox_turn_is_one_trace_from_client_to_tool_call(deployed: Deployed) -> None:
    from harness_run import sandbox

    otel = in_memory()
    spec = AgentSpec(
        name="sbx-otel",
        harness="claude-code",
        model=MODEL,
        secrets=[Secret("MY_TOKEN", required=False)],
    )
    with OtlpReceiver() as collector:
        engine = sandbox.deploy(
            spec,
            project=PROJECT,
            location=LOCATION,
            cluster=sandbox.ClusterTarget(api_client=deployed.cluster.api_client()),
            image=sandbox.ImageOptions(
                base_image=deployed.base_image,
                ca_files=deployed.ca_files,
                build_network="host",
                registry=f"{deployed.registry}/hr-test",
                telemetry=True,
            ),
            pods=sandbox.PodOptions(
                runtime_class=None,
                env={
                    "OTEL_EXPORTER_OTLP_ENDPOINT": collector.endpoint,
                    "OTEL_SERVICE_NAME": "sandbox-worker",
                    "OTEL_BSP_SCHEDULE_DELAY": "100",
                },
            ),
            claims=sandbox.ClaimOptions(idle_ttl=60.0, claim_timeout=120.0),  # the worker stays up to export
            store=deployed.store_url,
            docker_client=deployed.docker_client,
            progress=False,
        )
        try:
            session = engine.start_session()
            result = await session.run("print the token", secrets=deployed.secrets(MY_TOKEN=CANARY))
            assert not result.is_error, result.error
            assert "***" in result.text or result.text == "done"
            worker_spans = await _wait(collector, {"harness_run.tool", "harness_run.turn"})
        finally:
            await engine.aclose()

    mine = otel.spans()
    [client_turn] = [s for s in mine if s["name"] == "harness_run.turn" and s["parent_id"] is None]
    trace_id = client_turn["context"]["trace_id"].removeprefix("0x")
    [claim] = [s for s in mine if s["name"] == "harness_run.claim"]
    assert claim["parent_id"] == client_turn["context"]["span_id"]
    [deploy] = [s for s in mine if s["name"] == "harness_run.deploy"]
    assert deploy["attributes"]["harness_run.engine"] == "sbx-otel"
    steps = {s["name"] for s in mine if s["parent_id"] == deploy["context"]["span_id"]}
    assert {"harness_run.compile", "harness_run.k8s.apply", "harness_run.deploy.pool_ready"} <= steps, steps

    in_trace = [s for s in worker_spans if s["trace_id"] == trace_id]
    names = {s["name"] for s in in_trace}
    assert {
        "harness_run.worker POST /v1/turns",
        "harness_run.turn",
        "harness_run.harness",
        "harness_run.tool",
    } <= names, names
    ids = {s["span_id"]: s for s in in_trace}
    [start] = [s for s in in_trace if s["name"] == "harness_run.worker POST /v1/turns"]
    assert start["parent_id"] == client_turn["context"]["span_id"].removeprefix("0x")
    [turn] = [s for s in in_trace if s["name"] == "harness_run.turn"]
    [tool] = [s for s in in_trace if s["name"] == "harness_run.tool"]
    assert ids[turn["parent_id"]] == start and ids[ids[tool["parent_id"]]["parent_id"]] == turn
    assert {s["service"] for s in in_trace} == {"sandbox-worker"}
    assert CANARY not in json.dumps(worker_spans) + json.dumps(mine)


async def _wait(collector: OtlpReceiver, names: set[str]) -> list[dict[str, Any]]:
    for _ in range(300):  # the worker's batch processor exports every 0.1 s
        if names <= {s["name"] for s in collector.spans}:
            return list(collector.spans)
        await asyncio.sleep(0.1)
    return list(collector.spans)
