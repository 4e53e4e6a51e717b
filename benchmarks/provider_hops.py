"""Provider hops: what each sandbox provider's round trips cost, side by side in one run.

E2B and Daytona on their API doubles, Agent Sandbox on the test cluster, docker on our dockerd.

Each provider deploys the same Claude Code spec (the scripted model on 127.0.0.1) and runs, per
round, in a fresh session:

  claim -> first event   a new sandbox and the turn's first event (E2B: create + settings file +
                         worker health through the double's router; Daytona: create from the
                         snapshot + health through the preview-link proxy; agent-sandbox: a claim
                         from the warm pool of 1; docker: container start + health)
  idle -> back -> first event
                         the session's sandbox goes idle the provider's way and the next turn's
                         first event arrives: E2B pauses it (``docker pause`` behind the double) and
                         resumes it (``connect``); Daytona stops and starts it (``docker stop``/
                         ``start``); agent-sandbox and docker release it (idle TTL) and the next turn
                         takes a new one, which resumes the session from the store
  no-op redeploy         deploy of the unchanged spec (E2B: the template is found by name; Daytona:
                         the snapshot exists; agent-sandbox: digest in the registry, manifests
                         unchanged; docker: the image tag exists)

The E2B and Daytona figures include their doubles' hops (a REST API and a reverse proxy in front of
each worker), so the difference to docker is the price of those hops plus each vendor's protocol.
Needs DOCKER_HOST, HARNESS_RUN_TEST_REGISTRY, the base image and PIP_CERT (as the docker tests).

    python -m benchmarks provider_hops [--rounds 5] [--providers e2b,daytona,agent-sandbox,docker]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import time
import uuid
from collections.abc import Awaitable, Callable, Generator
from typing import Any

from benchmarks._common import MODEL, median, model_secrets, percentile, scratch, scripted_model, testkit
from benchmarks._services import (
    bench_labels,
    docker_env,
    fake_gcs,
    gcs_store,
    sandbox_cluster,
    sandbox_deploy,
    wait_pool,
)

Deploy = Callable[[], Awaitable[Any]]
HOPS = ("claim -> first event", "idle -> back -> first event", "no-op redeploy")
IDLE = {
    "e2b-double": "paused -> resumed",
    "daytona-double": "stopped -> started",
    "agent-sandbox": "released -> new claim",
    "docker": "released -> new container",
}
PROVIDERS = ("e2b", "daytona", "agent-sandbox", "docker")


def p50_p95(values: list[float]) -> tuple[float, float]:
    ms = [v * 1000 for v in values]
    return median(ms), percentile(ms, 0.95)


async def first_event(session: Any, prompt: str, secrets: dict[str, str]) -> float:
    start = time.perf_counter()
    run = session.run(prompt, secrets=secrets)
    first: float | None = None
    async for _event in run:
        if first is None:
            first = time.perf_counter() - start
    result = await run
    if result.is_error:
        raise SystemExit(f"turn failed: {result.error}")
    return first if first is not None else time.perf_counter() - start


async def idle(engine: Any, session_id: str) -> None:
    """The session's sandbox goes idle the provider's way: paused (E2B), stopped (Daytona) or
    released (agent-sandbox, docker)."""
    claims = engine.claims
    if hasattr(claims, "pause_now"):  # E2B
        if not await claims.pause_now(session_id):
            raise SystemExit("the E2B sandbox could not be paused")
        return
    claim = claims.held(session_id)
    if claim is None:
        return
    if hasattr(claims, "stopped"):  # Daytona
        await claims.pause(claim)
        if claim.sandbox not in claims.stopped:
            raise SystemExit("the Daytona sandbox could not be stopped")
        return
    await claims.release(claim)


async def measure(
    deploy: Deploy, url: str, rounds: int, before_claim: Callable[[Any], Awaitable[None]] | None = None
) -> dict[str, list[float]]:
    secrets = model_secrets(url)
    engine = await deploy()
    out: dict[str, list[float]] = {hop: [] for hop in HOPS}
    try:
        await first_event(engine.start_session(), "warm up", secrets)  # images and caches warm
        for _ in range(rounds):
            if before_claim is not None:
                await before_claim(engine)
            session = engine.start_session()
            out[HOPS[0]].append(await first_event(session, "write out.txt", secrets))
            await idle(engine, session.session_id)
            if before_claim is not None:
                await before_claim(engine)
            out[HOPS[1]].append(await first_event(session, "write out.txt", secrets))
            await session.aclose()
            start = time.perf_counter()
            again = await deploy()
            out[HOPS[2]].append(time.perf_counter() - start)
            if again is not engine:
                await again.aclose()
    finally:
        await engine.aclose()
    return out


def table(results: dict[str, dict[str, list[float]]], rounds: int) -> None:
    names = list(results)
    print(f"\nprovider hops, {rounds} rounds each (p50 / p95 ms):\n")
    print("| hop | " + " | ".join(names) + " |")
    print("|---|" + "---:|" * len(names))
    for hop in HOPS:
        cells = [
            "{:.0f} / {:.0f}".format(*p50_p95(results[name][hop])) if results[name][hop] else "-"
            for name in names
        ]
        print(f"| {hop} | " + " | ".join(cells) + " |")
    print("| (idle means) | " + " | ".join(IDLE[name] for name in names) + " |")


class Bench:
    """The shared parts: docker, the base image, the CA, labels to clean up, a fake GCS store."""

    def __init__(self, stack: contextlib.ExitStack) -> None:
        from harness_run import AgentSpec

        self.docker = docker_env(ca=True, registry=True)
        self.client = self.docker.client
        self.ca, self.base_image, self.registry = self.docker.ca, self.docker.base_image, self.docker.registry
        self.spec = AgentSpec(name="bench-hops", harness="claude-code", model=MODEL, checkpoint=True)
        self.labels = bench_labels()
        stack.callback(self.cleanup)
        self.gcs = stack.enter_context(fake_gcs())

    def store(self) -> str:
        return gcs_store(self.gcs)

    def cleanup(self) -> None:
        mine = {"label": f"org.harness-run.bench={self.labels['org.harness-run.bench']}"}
        for c in self.client.containers.list(all=True, filters=mine):
            c.remove(force=True)


@contextlib.contextmanager
def e2b(bench: Bench) -> Generator[tuple[Deploy, Any]]:
    E2BDouble = testkit("e2b_double").E2BDouble

    from harness_run.runtime.e2b import deploy_e2b
    from harness_run.vocab.pins import DEFAULT_BASE_IMAGE

    with E2BDouble(
        bench.client,
        extra_env=dict(bench.gcs.env),
        labels=bench.labels,
        image_aliases={DEFAULT_BASE_IMAGE: bench.base_image},
        build_ca_files=[bench.ca],
    ) as double:
        store = bench.store()
        connection = {"api_url": double.url, "sandbox_url": double.url, "api_key": "bench-e2b"}

        async def deploy() -> Any:
            return await deploy_e2b(bench.spec, store=store, connection=connection, pause_after=3600)

        yield deploy, None


@contextlib.contextmanager
def daytona(bench: Bench) -> Generator[tuple[Deploy, Any]]:
    DaytonaDouble = testkit("daytona_double").DaytonaDouble

    from harness_run.runtime.container import share_store
    from harness_run.runtime.daytona import deploy_daytona

    store = scratch("hops-daytona-")
    share_store(store)
    key = f"bench-{uuid.uuid4().hex}"
    with DaytonaDouble(
        bench.client, api_key=key, volume_dirs={"hr-store": store}, labels=bench.labels
    ) as api:

        async def deploy() -> Any:
            return await asyncio.to_thread(
                deploy_daytona,
                bench.spec,
                store=str(store),
                store_volume="hr-store",
                api_key=key,
                api_url=api.url,
                registry=f"{bench.registry}/hr-bench",
                docker_client=bench.client,
                base_image=bench.base_image,
                ca_files=[bench.ca],
                idle_ttl=3600,
                labels=bench.labels,
                agent_netns="shared",  # the double's containers share the host's network namespace
            )

        yield deploy, None


@contextlib.contextmanager
def agent_sandbox(bench: Bench) -> Generator[tuple[Deploy, Any]]:
    from harness_run import sandbox

    with sandbox_cluster(bench.docker, bench.gcs, bench.labels) as cluster:
        store = bench.store()

        async def deploy() -> Any:
            return await asyncio.to_thread(
                sandbox_deploy,
                bench.spec,
                cluster,
                bench.docker,
                store,
                sandbox.ClaimOptions(idle_ttl=3600.0),
                warm_pool=1,
                progress=False,
            )

        async def pool_ready(engine: Any) -> None:  # each claim comes from a Ready warm pool
            await asyncio.to_thread(wait_pool, engine.kube, engine.pool, 1)

        yield deploy, pool_ready


@contextlib.contextmanager
def docker_provider(bench: Bench) -> Generator[tuple[Deploy, Any]]:
    from harness_run import local

    workdir = scratch("hops-")
    options = bench.docker.engine_options(idle_ttl=3600, labels=bench.labels)

    async def deploy() -> Any:
        return await asyncio.to_thread(local.deploy, bench.spec, workdir=workdir, **options)

    yield deploy, None


SETUPS = {"e2b": e2b, "daytona": daytona, "agent-sandbox": agent_sandbox, "docker": docker_provider}
NAMES = {
    "e2b": "e2b-double",
    "daytona": "daytona-double",
    "agent-sandbox": "agent-sandbox",
    "docker": "docker",
}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--providers", default=",".join(PROVIDERS))
    args = parser.parse_args()
    wanted = [p for p in args.providers.split(",") if p]
    unknown = sorted(set(wanted) - set(SETUPS))
    if unknown:
        raise SystemExit(f"unknown provider(s) {unknown}; choose from {', '.join(PROVIDERS)}")

    results: dict[str, dict[str, list[float]]] = {}
    with contextlib.ExitStack() as stack:
        bench = Bench(stack)
        url = stack.enter_context(scripted_model())
        for provider in wanted:
            with SETUPS[provider](bench) as (deploy, before_claim):
                name = NAMES[provider]
                results[name] = asyncio.run(measure(deploy, url, args.rounds, before_claim))
                print(f"{name}, {args.rounds} rounds:", flush=True)
                for hop in HOPS:
                    p50, p95 = p50_p95(results[name][hop])
                    print(f"  {hop}: p50 {p50:.0f} ms  p95 {p95:.0f} ms  (n={len(results[name][hop])})")
    table(results, args.rounds)
    print(f"\nmachine: {os.cpu_count()} cores")


if __name__ == "__main__":
    main()
