"""Cost of egress control, one labelled number per line.

    python -m benchmarks egress [--requests N] [--container --turns N] [--smoke]

A streamed Messages request to the scripted model on a new connection each time (as a CLI's first
request, or a tool's ``curl``):

- egress_direct_p50_ms / _p95_ms: straight to the model;
- egress_proxy_p50_ms / _p95_ms: through the egress proxy on 127.0.0.1 (the worker's, in a pod);
- egress_relay_p50_ms / _p95_ms: through the loopback relay and the egress proxy on a unix socket
  with the worker's token (the container path: the model proxy's upstream inside a container
  without network);
- egress_proxy_added_p50_ms, egress_relay_added_p50_ms (and _p95_): the differences to direct.

``--container`` (needs Docker, the base image and ``PIP_CERT``, as the docker tests): whole Claude
Code turns (a tool call and an answer) in containers, open egress on the host network against
``network="none"``, alternating: egress_turn_open_ms, egress_turn_none_ms (medians) and
egress_turn_ratio.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics

from benchmarks._common import (
    Loop,
    claude_spec,
    local_engine,
    messages_request,
    model_secrets,
    percentile,
    scratch,
    timed_turns,
)
from benchmarks._services import docker_env
from harness_run.security import EgressProxy, LoopbackRelay
from harness_run.testing import Rule, ScriptedModel, shell, text

TOKEN = "bench-worker-token"


def _requests(model: ScriptedModel, n: int) -> dict[str, list[float]]:
    host = model.url.removeprefix("http://")
    loop = Loop()
    pod = EgressProxy([host])
    sock_dir = scratch("hr-bench-egress-")
    host_side = EgressProxy([], worker_token=TOKEN, unix_path=f"{sock_dir}/egress.sock")
    relay = LoopbackRelay(f"{sock_dir}/egress.sock")
    for server in (pod, host_side, relay):
        loop.run(server.start())
    samples: dict[str, list[float]] = {"direct": [], "proxy": [], "relay": []}
    try:
        for _ in range(n):  # alternate, so load on the machine hits all alike
            samples["direct"].append(messages_request(model.url))
            samples["proxy"].append(messages_request(model.url, proxy=f"http://127.0.0.1:{pod.port}"))
            samples["relay"].append(
                messages_request(model.url, proxy=f"http://127.0.0.1:{relay.port}", auth=TOKEN)
            )
    finally:
        for server in (relay, host_side, pod):
            loop.run(server.aclose())
    return samples


async def _container_turns(model: ScriptedModel, n: int) -> tuple[list[float], list[float]]:
    options = docker_env("--container").engine_options()
    workdir = scratch("hr-bench-egress-ctr-")
    secrets = model_secrets(model.url)
    engines = [
        local_engine(claude_spec(f"bench-egress-{label}", network=label), workdir=workdir, **options)
        for label in ("open", "none")
    ]
    open_ms: list[float] = []
    none_ms: list[float] = []
    try:
        for i in range(n + 1):
            for engine, samples in zip(engines, (open_ms, none_ms), strict=True):
                took = await timed_turns(engine.start_session(), secrets, "go") * 1000
                if i:  # the first round starts cold
                    samples.append(took)
    finally:
        for engine in engines:
            await engine.aclose()
    return open_ms, none_ms


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument("--container", action="store_true", help="also whole turns in containers (Docker)")
    parser.add_argument("--turns", type=int, default=5)
    parser.add_argument("--smoke", action="store_true", help="a short run (CI smoke test)")
    args = parser.parse_args()
    requests = 15 if args.smoke else args.requests
    with ScriptedModel([Rule(reply=text("hello"))]) as model:
        samples = await asyncio.to_thread(_requests, model, requests)
    for label, values in samples.items():
        print(f"egress_{label}_p50_ms {percentile(values, 0.5):.2f}")
        print(f"egress_{label}_p95_ms {percentile(values, 0.95):.2f}")
    for label in ("proxy", "relay"):
        for q, name in ((0.5, "p50"), (0.95, "p95")):
            added = percentile(samples[label], q) - percentile(samples["direct"], q)
            print(f"egress_{label}_added_{name}_ms {added:.2f}")
    if args.container:
        with ScriptedModel(
            [Rule(reply=shell("echo bench")), Rule(reply=text("done"), tool_result=True)]
        ) as model:
            open_ms, none_ms = await _container_turns(model, 1 if args.smoke else args.turns)
        print(f"egress_turn_open_ms {statistics.median(open_ms):.0f}")
        print(f"egress_turn_none_ms {statistics.median(none_ms):.0f}")
        print(f"egress_turn_ratio {statistics.median(none_ms) / statistics.median(open_ms):.3f}")


if __name__ == "__main__":
    asyncio.run(main())
