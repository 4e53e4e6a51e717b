"""Cost of egress control, one labelled number per line.

    python benchmarks/egress.py [--requests N] [--container --turns N] [--smoke]

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
import base64
import json
import os
import statistics
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Coroutine
from pathlib import Path
from typing import Any, TypeVar

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from harness_run import AgentSpec, local  # noqa: E402
from harness_run.security import EgressProxy, LoopbackRelay  # noqa: E402
from harness_run.testing import Rule, ScriptedModel, shell, text  # noqa: E402

_T = TypeVar("_T")
BODY = json.dumps(
    {
        "model": "claude-sonnet-4-6",
        "max_tokens": 100,
        "stream": True,
        "messages": [{"role": "user", "content": "hi"}],
    }
).encode()
TOKEN = "bench-worker-token"


def _pct(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def _request(url: str, proxy: str | None, auth: str | None = None) -> float:
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({"http": proxy} if proxy else {}))
    headers = {"x-api-key": "sk-bench", "content-type": "application/json", "anthropic-version": "2023-06-01"}
    if auth:
        headers["Proxy-Authorization"] = "Basic " + base64.b64encode(f"worker:{auth}".encode()).decode()
    start = time.perf_counter()
    with opener.open(
        urllib.request.Request(f"{url}/v1/messages", data=BODY, headers=headers), timeout=30
    ) as r:
        r.read()
    return (time.perf_counter() - start) * 1000


class _Loop:
    """An event loop in a thread, for the proxies (the requests block the main thread)."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        threading.Thread(target=self.loop.run_forever, daemon=True).start()

    def run(self, coro: Coroutine[Any, Any, _T]) -> _T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(30)


def _requests(model: ScriptedModel, n: int) -> dict[str, list[float]]:
    host = model.url.removeprefix("http://")
    loop = _Loop()
    pod = EgressProxy([host])
    sock_dir = tempfile.mkdtemp(prefix="hr-bench-egress-")
    host_side = EgressProxy([], worker_token=TOKEN, unix_path=f"{sock_dir}/egress.sock")
    relay = LoopbackRelay(f"{sock_dir}/egress.sock")
    for server in (pod, host_side, relay):
        loop.run(server.start())
    samples: dict[str, list[float]] = {"direct": [], "proxy": [], "relay": []}
    try:
        for _ in range(n):  # alternate, so load on the machine hits all alike
            samples["direct"].append(_request(model.url, None))
            samples["proxy"].append(_request(model.url, f"http://127.0.0.1:{pod.port}"))
            samples["relay"].append(_request(model.url, f"http://127.0.0.1:{relay.port}", TOKEN))
    finally:
        for server in (relay, host_side, pod):
            loop.run(server.aclose())
    return samples


async def _container_turns(model: ScriptedModel, n: int) -> tuple[list[float], list[float]]:
    import docker

    ca = os.environ.get("PIP_CERT", "")
    options: dict[str, Any] = {
        "isolation": "container",
        "docker_client": docker.from_env(timeout=600),
        "ca_files": [ca] if ca else [],
        "network_mode": "host",
        "base_image": os.environ.get("HARNESS_RUN_TEST_BASE_IMAGE", "harness-run/base:trixie"),
    }
    workdir = Path(tempfile.mkdtemp(prefix="hr-bench-egress-ctr-"))
    secrets = {"ANTHROPIC_BASE_URL": model.url, "ANTHROPIC_API_KEY": "sk-bench"}
    engines = [
        local.deploy(
            AgentSpec(
                name=f"bench-egress-{label}", harness="claude-code", model="claude-sonnet-4-6", network=label
            ),
            workdir=workdir,
            **options,
        )
        for label in ("open", "none")
    ]
    open_ms: list[float] = []
    none_ms: list[float] = []
    try:
        for i in range(n + 1):
            for engine, samples in zip(engines, (open_ms, none_ms), strict=True):
                start = time.perf_counter()
                result = await engine.start_session().run("go", secrets=secrets)
                took = (time.perf_counter() - start) * 1000
                assert not result.is_error, result.error
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
        print(f"egress_{label}_p50_ms {_pct(values, 0.5):.2f}")
        print(f"egress_{label}_p95_ms {_pct(values, 0.95):.2f}")
    for label in ("proxy", "relay"):
        for q, name in ((0.5, "p50"), (0.95, "p95")):
            added = _pct(samples[label], q) - _pct(samples["direct"], q)
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
