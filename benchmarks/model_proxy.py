"""Cost of the model proxy and of the guard hook, one labelled number per line.

    python -m benchmarks model_proxy [--requests N] [--turns N] [--smoke]

- proxy_request_direct_p50_ms / _p95_ms: a streamed Messages request straight to the scripted model;
- proxy_request_proxied_p50_ms / _p95_ms: the same through the model proxy (token check, key swap,
  streamed back), and proxy_added_p50_ms / proxy_added_p95_ms the difference;
- proxy_turn_off_ms / proxy_turn_on_ms / proxy_turn_ratio: the median of whole Claude Code turns (a
  tool call and an answer: two model requests) with the proxy off (``HARNESS_RUN_MODEL_PROXY=0``)
  and on, alternating;
- guard_hook_p50_ms / guard_hook_p95_ms: one run of the guard hook command as an engine's turn has
  it (the fail-closed wrapper and the small client asking the turn's guard server), for a tool call,
  as Claude Code and Codex run it; guard_script_p50_ms / _p95_ms: the self-contained script
  (``python -I -S _guard.py RULES``, what a launch plan outside an engine gets), alternating;
- guard_http_p50_ms / _p95_ms: the same verdict as Claude Code's HTTP hook gets it (a POST of the
  tool call to the guard route on the model proxy's port, over a kept-alive connection as Claude
  Code's client keeps it): what a Claude Code turn pays per tool call when the proxy is on.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time

from benchmarks._cli import guard_hook_times
from benchmarks._common import (
    claude_spec,
    local_engine,
    messages_request,
    model_proxy,
    model_secrets,
    percentile,
    timed_turns,
)
from harness_run import SecurityPolicy
from harness_run.security import ModelProxy
from harness_run.testing import Rule, ScriptedModel, shell, text

GUARDED = "ls -la && git status"
"""The tool call the guard judges: a Bash command that its policy (``git push*`` denied) allows."""


async def _requests(model: ScriptedModel, n: int) -> tuple[list[float], list[float]]:
    proxy = ModelProxy()
    env = proxy.substitute("claude-code", model_secrets(model.url))
    await proxy.start()
    direct: list[float] = []
    proxied: list[float] = []
    try:
        for _ in range(n):  # alternate, so load on the machine hits both alike
            direct.append(await asyncio.to_thread(messages_request, model.url))
            proxied.append(
                await asyncio.to_thread(messages_request, env["ANTHROPIC_BASE_URL"], env["ANTHROPIC_API_KEY"])
            )
    finally:
        await proxy.aclose()
    return direct, proxied


async def _turns(model: ScriptedModel, n: int) -> tuple[list[float], list[float]]:
    secrets = model_secrets(model.url)
    off: list[float] = []
    on: list[float] = []
    engine = local_engine(claude_spec("bench-proxy"), "hr-bench-proxy-")
    try:
        for i in range(n + 1):
            for proxied, samples in ((False, off), (True, on)):
                with model_proxy(proxied):
                    took = await timed_turns(engine.start_session(), secrets, "go") * 1000
                if i:  # the first round warms caches (and imports aiohttp once)
                    samples.append(took)
    finally:
        engine.close()
    return off, on


async def _guard_http(n: int) -> list[float]:
    import http.client

    from harness_run.security import GuardBroker

    policy = SecurityPolicy(denied_bash_patterns=["git push*"])
    broker = GuardBroker()
    env = broker.substitute(policy, {})
    proxy = ModelProxy()
    url = proxy.guard_route(broker.http_verdict, env["HARNESS_RUN_GUARD_TOKEN"])
    await proxy.start()
    call = json.dumps({"tool_name": "Bash", "tool_input": {"command": GUARDED}}).encode()
    path = url.split(str(proxy.port), 1)[1]

    def post_all() -> list[float]:
        conn = http.client.HTTPConnection("127.0.0.1", proxy.port, timeout=10)
        out: list[float] = []
        for _ in range(n):
            start = time.perf_counter()
            conn.request("POST", path, body=call, headers={"content-type": "application/json"})
            answer = conn.getresponse()
            assert answer.status == 200
            assert answer.read() == b"{}"
            out.append((time.perf_counter() - start) * 1000)
        conn.close()
        return out

    try:
        return await asyncio.to_thread(post_all)
    finally:
        await proxy.aclose()
        await broker.aclose()


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument("--turns", type=int, default=8)
    parser.add_argument("--smoke", action="store_true", help="a short run (CI smoke test)")
    args = parser.parse_args()
    requests, turns, guards = (20, 1, 10) if args.smoke else (args.requests, args.turns, 100)
    with ScriptedModel(
        [
            Rule(reply=text("hello")),
            Rule(reply=shell("echo bench")),
            Rule(reply=text("done"), tool_result=True),
        ]
    ) as model:
        direct, proxied = await _requests(model, requests)
    for label, samples in (("direct", direct), ("proxied", proxied)):
        print(f"proxy_request_{label}_p50_ms {percentile(samples, 0.5):.2f}")
        print(f"proxy_request_{label}_p95_ms {percentile(samples, 0.95):.2f}")
    print(f"proxy_added_p50_ms {percentile(proxied, 0.5) - percentile(direct, 0.5):.2f}")
    print(f"proxy_added_p95_ms {percentile(proxied, 0.95) - percentile(direct, 0.95):.2f}")
    with ScriptedModel(
        [Rule(reply=shell("echo bench")), Rule(reply=text("done"), tool_result=True)]
    ) as model:
        off, on = await _turns(model, turns)
    print(f"proxy_turn_off_ms {statistics.median(off):.0f}")
    print(f"proxy_turn_on_ms {statistics.median(on):.0f}")
    print(f"proxy_turn_ratio {statistics.median(on) / statistics.median(off):.3f}")
    served, script = await guard_hook_times(
        SecurityPolicy(denied_bash_patterns=["git push*"]), GUARDED, guards
    )
    print(f"guard_hook_p50_ms {percentile(served, 0.5):.1f}")
    print(f"guard_hook_p95_ms {percentile(served, 0.95):.1f}")
    print(f"guard_script_p50_ms {percentile(script, 0.5):.1f}")
    print(f"guard_script_p95_ms {percentile(script, 0.95):.1f}")
    http_hook = await _guard_http(guards)
    print(f"guard_http_p50_ms {percentile(http_hook, 0.5):.2f}")
    print(f"guard_http_p95_ms {percentile(http_hook, 0.95):.2f}")


if __name__ == "__main__":
    asyncio.run(main())
