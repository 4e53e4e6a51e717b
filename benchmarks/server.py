"""The team server: `harness-run serve` cold start, and a scripted turn through it vs in process.

1. cold start: `harness-run serve --spec FILE --port 0` from exec to the first 200 from /healthz;
2. the same scripted Claude Code turn (a shell tool call, then text) in process (`await
   session.run()`) and through the server (`harness_run.connect(...)`), alternating, after a
   warm-up: medians and their ratio;
3. first event latency: from starting the turn to its first event, in process vs through the
   server's SSE stream (the difference is what the server adds).

    python -m benchmarks server [--rounds N] [--starts N]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import time
from pathlib import Path

from benchmarks._common import (
    PROMPT,
    alternating,
    claude_spec,
    local_engine,
    median,
    model_secrets,
    ratio,
    report,
    scratch,
    scripted_model,
)
from benchmarks._services import make_key, start_server, stop_server


async def turns(url: str, key: str, model_url: str, store: Path, rounds: int) -> dict[str, list[float]]:
    import harness_run

    engines = {
        "local": local_engine(workdir=store / "local"),
        "server": harness_run.connect(url, api_key=key),
    }
    secrets = model_secrets(model_url)
    times: dict[str, list[float]] = {"local": [], "server": [], "local_first": [], "server_first": []}
    for name, measured in alternating(("local", "server"), rounds):
        session = engines[name].start_session()
        start = time.perf_counter()
        run = session.run(PROMPT, secrets=secrets)
        first = None
        async for _ in run:
            first = first or time.perf_counter() - start
        result = await run
        assert not result.is_error, result.error
        if measured:
            times[name].append(time.perf_counter() - start)
            times[f"{name}_first"].append(first or 0.0)
    for engine in engines.values():
        await engine.aclose()
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--starts", type=int, default=3)
    args = parser.parse_args()
    store = scratch("server-store-")
    spec_file = store / "agent.yaml"
    spec_file.write_text(claude_spec().to_yaml())
    key = make_key(store)
    starts = []
    for _ in range(args.starts):
        proc, _, took = start_server(store, spec_file)
        starts.append(took)
        stop_server(proc)
    report("serve cold start to healthy", starts)
    os.environ.pop("ANTHROPIC_API_KEY", None)
    with scripted_model() as model_url:
        proc, url, _ = start_server(store, spec_file)
        try:
            times = asyncio.run(turns(url, key, model_url, store, args.rounds))
        finally:
            stop_server(proc)
    report("turn in process", times["local"])
    report("turn through the server", times["server"])
    ratio("ratio server / in process", times["server"], times["local"])
    report("first event, in process", [t * 1000 for t in times["local_first"]], "ms")
    report("first event, through the server", [t * 1000 for t in times["server_first"]], "ms")
    added = (median(times["server_first"]) - median(times["local_first"])) * 1000
    print(f"first event added by the server: {added:.1f} ms")


if __name__ == "__main__":
    main()
