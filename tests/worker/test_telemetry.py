"""The worker continues the client's trace: ``WorkerClient`` sends W3C ``traceparent``; the worker
process (``python -m harness_run.worker``, spans written as JSON lines through
``HARNESS_RUN_OTEL_FILE``) records its request, turn, harness and tool spans in the same trace, with
no secret value in any of them. Real ``claude`` against the scripted model."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest
from testkit.otel import in_memory, read_span_lines

from harness_run import telemetry
from harness_run.runtime.worker_client import TurnRequest, WorkerClient
from harness_run.testing import ScriptedModel, shell, text

from .conftest import CANARY, TOKEN, WorkerFactory, model_secrets, new_session

pytestmark = [pytest.mark.harness, pytest.mark.integration]


async def test_a_turn_on_the_worker_is_one_trace_with_the_client(
    start_worker: WorkerFactory, sqlite_url: str, model: ScriptedModel, tmp_path: Path
) -> None:
    otel = in_memory()
    spans_file = tmp_path / "worker-spans.jsonl"
    model.add(shell("echo $CANARY_TOKEN"), text(f"saw {CANARY}"))
    worker = start_worker(sqlite_url, env={"HARNESS_RUN_OTEL_FILE": str(spans_file)})
    sid = new_session(sqlite_url)
    request = TurnRequest(
        turn_id=uuid.uuid4().hex,
        session_id=sid,
        prompt="show it",
        secrets=model_secrets(model, CANARY_TOKEN=CANARY),
    )
    with telemetry.span("client turn") as client:
        async with WorkerClient(worker.url, TOKEN) as worker_client:
            info = await worker_client.start_turn(request)
            events = [e async for e in worker_client.events(info.turn_id)]
    assert events[-1]["type"] == "result" and events[-1]["result"]["text"] == "saw ***"
    assert worker.stop() == 0  # flushes the worker's spans

    [client_span] = [s for s in otel.spans() if s["name"] == "client turn"]
    trace_id = client_span["context"]["trace_id"]
    assert client.trace_id is not None and trace_id == f"0x{client.trace_id}"
    spans = read_span_lines(spans_file)
    ids = {s["context"]["span_id"]: s for s in spans}
    start = next(s for s in spans if s["name"] == "harness_run.worker POST /v1/turns")
    assert start["parent_id"] == client_span["context"]["span_id"]  # continued the client's trace
    assert start["resource"]["attributes"]["service.name"] == "harness-run-worker"
    [turn] = [s for s in spans if s["name"] == "harness_run.turn"]
    [harness] = [s for s in spans if s["name"] == "harness_run.harness"]
    [tool] = [s for s in spans if s["name"] == "harness_run.tool"]
    assert ids[turn["parent_id"]] == start
    assert ids[harness["parent_id"]] == turn and ids[tool["parent_id"]] == harness
    assert {s["context"]["trace_id"] for s in (start, turn, harness, tool)} == {trace_id}
    stream = next(s for s in spans if s["name"] == "harness_run.worker GET /v1/turns/{turn_id}/events")
    assert stream["context"]["trace_id"] == trace_id
    assert turn["attributes"]["harness_run.session"] == sid
    assert turn["attributes"]["harness_run.stop_reason"] == "completed"
    assert CANARY not in spans_file.read_text() and CANARY not in json.dumps(otel.spans())
