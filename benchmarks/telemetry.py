"""The cost of OpenTelemetry in harness-run.

1. the instrumentation of one turn (turn span, set-up, harness, 3 tool spans, 2 store writes, a
   ``traceparent`` injected), repeated: with no provider (the no-op facade) and with the SDK and an
   in-memory exporter;
2. the same scripted Claude Code turn in process, ROUNDS times without a provider, then ROUNDS times
   with the SDK (an in-memory exporter, SimpleSpanProcessor): medians and their ratio;
3. the modules a fresh ``import harness_run, harness_run.local`` loads (no ``opentelemetry``).

    python -m benchmarks telemetry [--rounds N] [--loops N] [--smoke]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import time

from benchmarks._common import (
    claude_spec,
    local_engine,
    model_secrets,
    ratio,
    report,
    scripted_model,
    timed_turns,
)


def one_turn_of_spans() -> None:
    from harness_run import telemetry

    turn = telemetry.start_span("harness_run.turn", engine="e", session="s", turn=1, harness="h", model="m")
    with turn.current():
        telemetry.inject({"Authorization": "x"})
        with telemetry.span("harness_run.setup", session="s", turn=1):
            pass
        with telemetry.span("harness_run.harness", harness="h") as harness:
            for i in range(3):
                telemetry.start_span("harness_run.tool", parent=harness, tool="Bash", tool_id=str(i)).end()
        for _ in range(2):
            with telemetry.span("harness_run.store.write", session="s", turn=1):
                pass
    turn.set(stop_reason="completed", input_tokens=10, output_tokens=5, cost_usd=0.001)
    turn.end()


def micro(loops: int) -> float:
    for _ in range(20):  # imports and first-use set-up are not what is measured
        one_turn_of_spans()
    started = time.perf_counter()
    for _ in range(loops):
        one_turn_of_spans()
    return (time.perf_counter() - started) / loops * 1e6


def install_sdk() -> None:
    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(InMemorySpanExporter()))
    trace.set_tracer_provider(provider)


async def turns(model_url: str, rounds: int) -> list[float]:
    engine = local_engine(claude_spec("bench-otel"), "d-")
    secrets = model_secrets(model_url)
    times: list[float] = []
    for i in range(rounds + 1):
        took = await timed_turns(engine.start_session(), secrets)
        if i:
            times.append(took)
    await engine.aclose()
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--loops", type=int, default=2000)
    parser.add_argument("--smoke", action="store_true", help="1 round, 200 loops")
    args = parser.parse_args()
    if args.smoke:
        args.rounds, args.loops = 1, 200
    code = "import sys, harness_run, harness_run.local; print(sum(m.startswith('opentelemetry') for m in sys.modules))"
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    print(f"opentelemetry modules after import harness_run, harness_run.local: {loaded.strip()}")
    os.environ.pop("ANTHROPIC_API_KEY", None)
    with scripted_model() as model_url:
        off_turns = asyncio.run(turns(model_url, args.rounds))
        off = micro(args.loops)
        install_sdk()
        on = micro(args.loops)
        on_turns = asyncio.run(turns(model_url, args.rounds))
    print(f"one turn's instrumentation, no provider: {off:.1f} us")
    print(f"one turn's instrumentation, SDK + in-memory exporter: {on:.1f} us")
    report("turn, tracing off", off_turns)
    report("turn, tracing on", on_turns)
    ratio("ratio on / off", on_turns, off_turns)


if __name__ == "__main__":
    main()
