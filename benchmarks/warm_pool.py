"""Warm pool: turn latency on the test cluster, warm (a Ready sandbox waits in the pool) vs cold.

Deploys a Claude Code spec to the test cluster (the Kubernetes API emulator + the test controller,
which runs each Sandbox as a real container of the compiled image), with history in fake GCS and
the scripted model on 127.0.0.1. Each measured turn is the first turn of a new session, so it
takes a new claim; the claim is released right after (``idle_ttl=0``). Before each warm turn the
pool is back at its size. Prints p50/p95 of:

  claim -> Ready         SandboxClaim created -> Ready, worker address known
  claim -> first event   SandboxClaim created -> the turn's first event here (worker started it)
  claim -> result        SandboxClaim created -> the result here
  run() -> first event / result: the same from session.run() (adds the store's turn reservation)
  turn inside the sandbox: the worker's own duration of the turn (the harness CLI and its setup)

and the wall time of a no-op redeploy (digest already in the registry: nothing built or pushed).
Needs DOCKER_HOST, HARNESS_RUN_TEST_REGISTRY, the base image and PIP_CERT (as the docker tests).

    python -m benchmarks warm_pool [--turns 20] [--cold-turns 20]
"""

from __future__ import annotations

import argparse
import asyncio
import time
from typing import Any

from benchmarks._common import MODEL, median, model_secrets, percentile, scripted_model
from benchmarks._services import (
    bench_labels,
    docker_env,
    fake_gcs,
    gcs_store,
    sandbox_cluster,
    sandbox_deploy,
    wait_pool,
)


def show(label: str, values: list[float]) -> None:
    ms = [v * 1000 for v in values]
    print(
        f"{label}: p50 {median(ms):.0f} ms  p95 {percentile(ms, 0.95):.0f} ms  "
        f"min {min(ms):.0f}  max {max(ms):.0f}  (n={len(ms)})"
    )


def report(m: dict[str, list[float]]) -> None:
    show("  claim -> Ready (+ worker address)", m["ready"])
    show("  claim -> first event", m["claim_first"])
    show("  claim -> result", m["claim_result"])
    show("  run() -> first event", m["first"])
    show("  run() -> result", m["result"])
    show("  turn inside the sandbox (worker's duration_s)", m["inside"])


async def measure(engine: Any, url: str, turns: int, pool_size: int) -> dict[str, list[float]]:
    secrets = model_secrets(url)
    out: dict[str, list[float]] = {
        k: [] for k in ("ready", "claim_first", "claim_result", "first", "result", "inside")
    }
    for _ in range(turns):
        if pool_size:
            await asyncio.to_thread(wait_pool, engine.kube, engine.pool, pool_size)
        session = engine.start_session()
        start, wall = time.perf_counter(), time.time()
        run = session.run("write out.txt", secrets=secrets)
        first = None
        async for _event in run:
            if first is None:
                first = time.perf_counter() - start
        result = await run
        took = time.perf_counter() - start
        if result.is_error:
            raise SystemExit(f"turn failed: {result.error}")
        out["first"].append(first or took)
        out["result"].append(took)
        claim = engine.claims.claimed[-1]
        created = claim.claimed_at - claim.ready_s - wall  # seconds after run() the claim was made
        out["ready"].append(claim.ready_s)
        out["claim_first"].append((first or took) - created)
        out["claim_result"].append(took - created)
        out["inside"].append(result.duration_s)
    await engine.aclose()
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--turns", type=int, default=20, help="warm turns")
    parser.add_argument("--cold-turns", type=int, default=20, help="cold turns")
    parser.add_argument("--pool", type=int, default=2, help="warm pool size")
    args = parser.parse_args()

    from harness_run import AgentSpec, sandbox

    docker = docker_env(ca=True, registry=True)
    spec = AgentSpec(name="bench-pool", harness="claude-code", model=MODEL, checkpoint=True)
    labels = bench_labels()
    with fake_gcs() as gcs, sandbox_cluster(docker, gcs, labels) as cluster, scripted_model() as url:
        store = gcs_store(gcs)

        def deploy(warm: int, progress: bool = False) -> Any:
            claims = sandbox.ClaimOptions(idle_ttl=0.0)
            return sandbox_deploy(spec, cluster, docker, store, claims, warm_pool=warm, progress=progress)

        start = time.perf_counter()
        engine = deploy(args.pool, progress=True)
        print(f"first deploy (build, push, apply, pool ready): {time.perf_counter() - start:.1f} s")
        noop = []
        for _ in range(5):
            start = time.perf_counter()
            deploy(args.pool)
            noop.append(time.perf_counter() - start)
        show("no-op redeploy wall time", noop)

        # measure() closes the engine it is given: each measurement gets its own (a no-op redeploy)
        asyncio.run(measure(engine, url, 2, args.pool))  # warm-up: image layers, page cache
        warm = asyncio.run(measure(deploy(args.pool), url, args.turns, args.pool))
        print(f"\nwarm (pool of {args.pool}), {args.turns} turns:")
        report(warm)

        engine = deploy(0)
        cold = asyncio.run(measure(engine, url, args.cold_turns, 0))
        print(f"\ncold (no pool), {args.cold_turns} turns:")
        report(cold)


if __name__ == "__main__":
    main()
