"""One trace of a turn on the test cluster. The engine is deployed once per module from an image
built with ``ImageOptions(telemetry=True)``; its worker (a real container) exports its spans over
OTLP/HTTP (configured by ``OTEL_*`` in ``PodOptions.env``) to a collector on 127.0.0.1.

- In process: the client's turn (``sandbox.get_engine`` → a claim on the warm pool) sends
  ``traceparent`` to the worker; the client's turn, claim, the worker's request, its turn, the
  harness and the tool call share one trace id.
- Through the team server: a real ``harness-run serve`` process serves the sandbox engine from the
  store (``--project/--location/--cluster`` and ``KUBECONFIG``); ``harness_run.connect`` runs a
  turn, streams it, a second client re-attaches mid-turn, reads history, runs a command and a
  second turn is interrupted; client → server → worker → harness → tool spans share one trace id
  across three processes.

No secret in any span (canary).
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from testkit.otel import OtlpReceiver, in_memory

import harness_run
from harness_run import AgentSpec, Secret
from harness_run.events import ResultEvent, ToolUseEvent

from .conftest import CANARY, CLUSTER, LOCATION, MODEL, PROJECT, Deployed

pytestmark = [pytest.mark.docker, pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(900)]


@dataclass
class Traced:
    """The module's telemetry-enabled engine, the collector its workers export to, the deploy's spans."""

    engine: Any
    collector: OtlpReceiver
    deploy_spans: list[dict[str, Any]]


@pytest.fixture(scope="module")
def traced(deployed: Deployed) -> Iterator[Traced]:
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
        yield Traced(engine, collector, otel.spans())  # the test that runs turns on it closes it


async def test_a_sandbox_turn_is_one_trace_from_client_to_tool_call(
    traced: Traced, deployed: Deployed
) -> None:
    otel = in_memory()
    engine, collector = traced.engine, traced.collector
    try:
        session = engine.start_session()
        result = await session.run("print the token", secrets=deployed.secrets(MY_TOKEN=CANARY))
        assert not result.is_error, result.error
        assert "***" in result.text or result.text == "done"
        mine = otel.spans()
        [client_turn] = [s for s in mine if s["name"] == "harness_run.turn" and s["parent_id"] is None]
        trace_id = client_turn["context"]["trace_id"].removeprefix("0x")
        # the worker exports while its sandbox is claimed
        worker_spans = await _wait(collector, trace_id, {"harness_run.tool", "harness_run.turn"})
    finally:
        await engine.aclose()
    [claim] = [s for s in mine if s["name"] == "harness_run.claim"]
    assert claim["parent_id"] == client_turn["context"]["span_id"]
    [deploy] = [s for s in traced.deploy_spans if s["name"] == "harness_run.deploy"]
    assert deploy["attributes"]["harness_run.engine"] == "sbx-otel"
    steps = {s["name"] for s in traced.deploy_spans if s["parent_id"] == deploy["context"]["span_id"]}
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
    assert CANARY not in json.dumps(worker_spans) + json.dumps(mine + traced.deploy_spans)


async def test_serve_serves_a_sandbox_engine_in_one_trace_from_client_to_tool_call(
    traced: Traced, deployed: Deployed
) -> None:
    """``harness-run serve`` over the store, told the cluster by flags and ``KUBECONFIG`` like a user."""
    from harness_run.server import create_key, key_store
    from harness_run.store import open_store

    otel = in_memory()
    store = open_store(deployed.store_url)
    try:
        _, key = create_key(key_store(store), "tests", scopes=("exec",))
    finally:
        store.close()
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "HARNESS_RUN_CLUSTER"))},
        "KUBECONFIG": str(deployed.kubeconfig),
        "OTEL_EXPORTER_OTLP_ENDPOINT": traced.collector.endpoint,
        "OTEL_SERVICE_NAME": "team-server",
        "OTEL_BSP_SCHEDULE_DELAY": "100",
    }
    cluster = ("--project", PROJECT, "--location", LOCATION, "--cluster", CLUSTER)
    # the runs name the scripted model's endpoint (on loopback) with their own key: allowed here
    proc = _serve(deployed.store_url, env, *cluster, "--allow-endpoints", "--allow-private-endpoints")
    try:
        assert proc.stdout is not None
        line = await asyncio.to_thread(proc.stdout.readline)
        assert line.startswith("harness-run server listening"), line + proc.communicate(timeout=30)[1]
        base = line.split()[-1]
        secrets = deployed.secrets(MY_TOKEN=CANARY)
        engine = harness_run.connect(base, api_key=key, engine="sbx-otel")
        assert engine.runtime == "server" and engine.spec.name == "sbx-otel"
        session = engine.start_session()
        other = harness_run.connect(base, api_key=key, engine="sbx-otel")  # a second client, made
        # before the turn: only its re-attach races the turn's command (it sleeps 4 s)
        run = session.run("echo the token after a pause", secrets=secrets)
        async for event in run:  # streamed over SSE as the worker in the sandbox makes them
            if isinstance(event, ToolUseEvent):
                break
        assert not run.done  # the tool call came while the turn runs
        again = other.get_session(session.session_id)
        assert again.current_run is not None  # re-attached to the running turn
        followed = [event async for event in again.current_run]
        result = await run
        assert not result.is_error and result.text == "done", result
        assert isinstance(followed[-1], ResultEvent) and followed[-1].result.text == "done"
        assert [e.type for e in run.events] == [e.type for e in followed if e.type != "delta"]
        assert [t.prompt for t in again.history()] == ["echo the token after a pause"]
        made = await again.exec("echo $((6*7))")  # on the session's sandbox, through the server
        assert (made.exit_code, made.stdout) == (0, "42\n")
        long = session.send("take your time", secrets=secrets)
        async for event in long:  # until its `sleep 6` runs in the sandbox
            if isinstance(event, ToolUseEvent):
                break
        await session.interrupt()
        assert (await long).stop_reason == "interrupted"
        assert [t.prompt for t in again.history()][-1] == "take your time"
        await other.aclose()
        await engine.aclose()
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = await asyncio.to_thread(proc.communicate, timeout=60)
    assert proc.returncode == 0, err
    assert "not serving" not in err and CANARY not in err

    mine = otel.spans()
    roots = [s for s in mine if s["name"] == "harness_run.turn" and s["parent_id"] is None]
    client_turn = min(roots, key=lambda s: s["start_time"])  # the first turn (the second was interrupted)
    trace_id = client_turn["context"]["trace_id"].removeprefix("0x")
    root = client_turn["context"]["span_id"].removeprefix("0x")
    exported, chain, parent = [], [], None
    for _ in range(300):  # until the worker's batch processor has exported the turn's spans
        exported = list(traced.collector.spans)
        chain, parent = _chain(exported, trace_id)
        if parent == root:
            break
        await asyncio.sleep(0.1)
    assert parent == root, chain
    assert chain == [
        ("sandbox-worker", "harness_run.tool"),
        ("sandbox-worker", "harness_run.harness"),
        ("sandbox-worker", "harness_run.turn"),
        ("sandbox-worker", "harness_run.worker POST /v1/turns"),
        ("team-server", "harness_run.turn"),
        ("team-server", "harness_run.server POST /v1/sessions/{session_id}/turns"),
    ], chain
    assert CANARY not in json.dumps(exported) + json.dumps(mine)


def _serve(store_url: str, env: dict[str, str], *flags: str) -> subprocess.Popen[str]:
    """``harness-run serve`` over ``store_url`` on a free port of 127.0.0.1, in its own process."""
    args = [
        sys.executable,
        "-m",
        "harness_run",
        "serve",
        "--store",
        store_url,
        "--port",
        "0",
        "--serve-recorded",
        *flags,
    ]
    return subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)


def _chain(spans: list[dict[str, Any]], trace_id: str) -> tuple[list[tuple[str, str]], str | None]:
    """(service, name) of the tool call's span of ``trace_id`` and its ancestors among ``spans``, and
    the parent id where the chain leaves them (the client's span, in another process)."""
    ids = {s["span_id"]: s for s in spans if s["trace_id"] == trace_id}
    span = next((s for s in ids.values() if s["name"] == "harness_run.tool"), None)
    chain: list[tuple[str, str]] = []
    parent: str | None = None
    while span is not None:
        chain.append((span["service"], span["name"]))
        parent = span["parent_id"]
        span = ids.get(parent) if parent else None
    return chain, parent


async def _wait(collector: OtlpReceiver, trace_id: str, names: set[str]) -> list[dict[str, Any]]:
    """The collector's spans once those named ``names`` in trace ``trace_id`` have come."""
    for _ in range(300):  # the batch processors export every 0.1 s
        if names <= {s["name"] for s in collector.spans if s["trace_id"] == trace_id}:
            break
        await asyncio.sleep(0.1)
    return list(collector.spans)
