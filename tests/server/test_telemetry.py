"""OpenTelemetry through the server (the SDK's in-memory exporter and metric reader): one trace of
a turn sent with ``harness_run.connect`` holds the client's turn, the server's request, the server's
turn and the harness's spans (set-up, CLI, each tool call, store writes) — real ``claude`` against
the scripted model; the server's metrics count it; no secret value reaches any span."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from testkit.otel import InMemoryTelemetry, in_memory

import harness_run
from harness_run import AgentSpec, Secret
from harness_run.testing import ScriptedModel, shell, text

from ._helpers import MODEL, ServerThread

CANARY = "canary-0e4b7d2c9a61f358"


@pytest.fixture
def otel() -> InMemoryTelemetry:
    return in_memory()


def by_id(spans: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {span["context"]["span_id"]: span for span in spans}


def parent_of(span: dict[str, Any], spans: dict[str, dict[str, Any]]) -> dict[str, Any] | None:
    return spans.get(span.get("parent_id") or "")


async def wait_spans(otel: InMemoryTelemetry, names: set[str]) -> list[dict[str, Any]]:
    """The spans once every name in ``names`` has finished (spans end just after the result)."""
    for _ in range(200):
        spans = otel.spans()
        if names <= {s["name"] for s in spans}:
            return spans
        await asyncio.sleep(0.05)
    return otel.spans()


def attrs_output_tokens(span: dict[str, Any]) -> int:
    return int(span["attributes"]["harness_run.output_tokens"])


@pytest.mark.harness
async def test_one_trace_from_the_client_through_the_server_to_the_tool_call(
    tmp_path: Path, scripted_model: ScriptedModel, otel: InMemoryTelemetry
) -> None:
    spec = AgentSpec(
        name="traced",
        harness="claude-code",
        model=MODEL,
        secrets=[Secret("CANARY")],
        model_base_url=scripted_model.url,
    )
    scripted_model.add(shell("echo $CANARY"), text(f"it was {CANARY}"))
    secrets = {"CANARY": CANARY, "ANTHROPIC_API_KEY": "k"}
    turns_before = sum(p.value for p in otel.metric_points("harness_run.server.turns"))
    with ServerThread(tmp_path, [spec]) as server:
        engine = harness_run.connect(server.url, api_key=server.key)
        session = engine.start_session()
        result = await session.run("show the value", secrets=secrets)
        assert result.text == "it was ***" and not result.is_error
        spans = await wait_spans(
            otel,
            {
                "harness_run.turn",
                "harness_run.tool",
                "harness_run.store.write",
                "harness_run.harness",
                "harness_run.model_request",
            },
        )
        await engine.aclose()

    sid = session.session_id
    ids = by_id(spans)
    turn_spans = [s for s in spans if s["name"] == "harness_run.turn"]
    client_turn = next(s for s in turn_spans if s["parent_id"] is None)
    server_turn = next(s for s in turn_spans if s["parent_id"] is not None)
    trace_id = client_turn["context"]["trace_id"]
    # one trace: client turn -> server request -> server turn -> harness -> tool call
    request = parent_of(server_turn, ids)
    assert (
        request is not None and request["name"] == "harness_run.server POST /v1/sessions/{session_id}/turns"
    )
    assert request["kind"] == "SpanKind.SERVER"
    assert parent_of(request, ids) == client_turn
    [harness] = [s for s in spans if s["name"] == "harness_run.harness"]
    [tool] = [s for s in spans if s["name"] == "harness_run.tool"]
    assert parent_of(harness, ids) == server_turn and parent_of(tool, ids) == harness
    assert tool["attributes"]["harness_run.tool"] == "Bash"
    # each model request through the turn's model proxy: a client span under the harness's span,
    # with its status, tokens and cost (and never the turn token in its path)
    requests = [s for s in spans if s["name"] == "harness_run.model_request"]
    answered = [r for r in scripted_model.requests if r.is_model_request]
    assert len(requests) == len(answered) >= 2
    assert all(parent_of(r, ids) == harness and r["kind"] == "SpanKind.CLIENT" for r in requests)
    assert all(r["attributes"]["harness_run.http_status"] == 200 for r in requests)
    assert sum(r["attributes"]["harness_run.output_tokens"] for r in requests) == attrs_output_tokens(
        server_turn
    )
    assert not any("hrp-" in json.dumps(r) for r in requests)
    setup = [s for s in spans if s["name"] == "harness_run.setup"]
    writes = [s for s in spans if s["name"] == "harness_run.store.write"]
    assert setup and all(parent_of(s, ids) == server_turn for s in setup + writes) and len(writes) == 2
    turn_related = [s for s in spans if s["context"]["trace_id"] == trace_id]
    assert {s["name"] for s in turn_related} >= {"harness_run.turn", "harness_run.tool", "harness_run.setup"}
    # the turn's attributes: engine, session, turn, harness, model, tokens, cost, stop reason
    attrs = server_turn["attributes"]
    assert attrs["harness_run.engine"] == "traced" and attrs["harness_run.session"] == sid
    assert (attrs["harness_run.turn"], attrs["harness_run.harness"]) == (1, "claude-code")
    assert attrs["harness_run.model"] == MODEL and attrs["harness_run.stop_reason"] == "completed"
    assert attrs["harness_run.output_tokens"] > 0 and "harness_run.cost_usd" in attrs
    assert client_turn["attributes"]["harness_run.stop_reason"] == "completed"
    # no secret value in any span (attributes, names, status messages)
    assert CANARY not in json.dumps(spans)

    # the server's metrics: the turn counted by engine/harness/outcome, its duration, no session left active
    counted = [
        p
        for p in otel.metric_points("harness_run.server.turns")
        if p.attributes.get("harness_run.outcome") == "completed"
        and p.attributes.get("harness_run.engine") == "traced"
    ]
    assert sum(p.value for p in counted) == 1
    assert sum(p.value for p in otel.metric_points("harness_run.server.turns")) == turns_before + 1
    durations = [
        p
        for p in otel.metric_points("harness_run.server.turn.duration")
        if p.attributes.get("harness_run.engine") == "traced"
    ]
    assert durations and durations[0].count == 1 and durations[0].sum > 0
    active = [
        p
        for p in otel.metric_points("harness_run.server.active_sessions")
        if p.attributes.get("harness_run.engine") == "traced"
    ]
    assert active and active[0].value == 0


def test_telemetry_off_costs_nothing_and_sends_no_header() -> None:
    """Without a configured provider (a fresh process), no OpenTelemetry module is imported by a
    turn's code paths and no ``traceparent`` header is added."""
    import subprocess
    import sys

    code = (
        "import sys\n"
        "from harness_run import telemetry\n"
        "import harness_run, harness_run.local, harness_run.server\n"
        "h = telemetry.inject({})\n"
        "with telemetry.span('x') as s: pass\n"
        "assert h == {} and not s.recording and not telemetry.enabled(), h\n"
        "print(sorted(m for m in sys.modules if m.startswith('opentelemetry')))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    assert out.stdout.strip() == "[]"


@pytest.mark.harness
def test_serve_exports_traces_and_metrics_over_otlp(tmp_path: Path, scripted_model: ScriptedModel) -> None:
    """The real ``harness-run serve`` process, set up by ``OTEL_*`` only: a request carrying a
    ``traceparent`` continues that trace; spans and the server's metrics reach an OTLP/HTTP
    collector on 127.0.0.1 (metrics flushed at shutdown)."""
    import os
    import signal
    import subprocess
    import sys
    import urllib.request

    from testkit.otel import OtlpReceiver

    from ._helpers import cli

    spec_file = tmp_path / "agent.yaml"
    spec_file.write_text(AgentSpec(name="otlp", harness="claude-code", model=MODEL).to_yaml())
    store = tmp_path / "store"
    key = cli("serve", "keys", "create", "--name", "ci", "--store", str(store)).stdout.split()[-1]
    scripted_model.add(shell("echo hi"), text("over otlp"))
    trace_id, parent_id = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
    with OtlpReceiver() as collector:
        env = {
            **{k: v for k, v in os.environ.items() if not k.startswith("OTEL_")},
            "OTEL_EXPORTER_OTLP_ENDPOINT": collector.endpoint,
            "OTEL_SERVICE_NAME": "team-server",
            "OTEL_BSP_SCHEDULE_DELAY": "100",
        }
        args = [sys.executable, "-m", "harness_run", "serve", "--store", str(store), "--spec", str(spec_file)]
        args.append("--allow-endpoints")  # the client names the scripted model's URL
        proc = subprocess.Popen(
            [*args, "--port", "0"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
        )
        try:
            assert proc.stdout is not None
            base = proc.stdout.readline().split()[-1]
            headers = {
                "Authorization": f"Bearer {key}",
                "Content-Type": "application/json",
                "traceparent": f"00-{trace_id}-{parent_id}-01",
            }
            made = urllib.request.Request(f"{base}/v1/workspaces", data=b"{}", method="POST", headers=headers)
            with urllib.request.urlopen(made, timeout=30) as answer:
                sid = json.loads(answer.read())["session_id"]
            secrets = {"ANTHROPIC_BASE_URL": scripted_model.url, "ANTHROPIC_API_KEY": "k"}
            body = json.dumps({"prompt": "hi", "secrets": secrets}).encode()
            prompt = urllib.request.Request(
                f"{base}/v1/workspaces/{sid}/prompt", data=body, method="POST", headers=headers
            )
            with urllib.request.urlopen(prompt, timeout=60) as answer:
                assert b'"type":"result"' in answer.read()
        finally:
            proc.send_signal(signal.SIGTERM)
            _, err = proc.communicate(timeout=30)
        assert proc.returncode == 0, err
        spans, metrics = list(collector.spans), dict(collector.metrics)

    prompt_span = next(s for s in spans if s["name"].endswith("POST /v1/workspaces/{session_id}/prompt"))
    assert (prompt_span["trace_id"], prompt_span["parent_id"]) == (trace_id, parent_id)
    assert prompt_span["service"] == "team-server"
    in_trace = {s["name"] for s in spans if s["trace_id"] == trace_id}
    assert {"harness_run.turn", "harness_run.harness", "harness_run.tool"} <= in_trace
    [turns] = metrics["harness_run.server.turns"][-1:]
    assert turns["value"] == 1 and turns["attributes"]["harness_run.outcome"] == "completed"
    assert metrics["harness_run.server.turn.duration"][-1]["value"] == 1  # one turn in the histogram
