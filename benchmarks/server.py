"""The team server: `harness-run serve` cold start, and a scripted turn through it vs in process.

1. cold start: `harness-run serve --spec FILE --port 0` from exec to the first 200 from /healthz;
2. the same scripted Claude Code turn (a shell tool call, then text) in process (`await
   session.run()`) and through the server (`harness_run.connect(...)`), alternating, after a
   warm-up: medians and their ratio;
3. first event latency: from starting the turn to its first event, in process vs through the
   server's SSE stream (the difference is what the server adds).

    python benchmarks/server.py [--rounds N] [--starts N]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import KEY, MODEL, median, report, scratch, scripted_model

PROMPT = "write out.txt"


def start_server(store: Path, spec_file: Path) -> tuple[subprocess.Popen[str], str, float]:
    """A `harness-run serve` process, its URL and the seconds from exec to a healthy /healthz."""
    started = time.perf_counter()
    args = [sys.executable, "-m", "harness_run", "serve", "--store", str(store), "--spec", str(spec_file)]
    args.append("--allow-endpoints")  # the runs name the scripted model's endpoint, with their own key
    proc = subprocess.Popen(
        [*args, "--port", "0"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True
    )
    assert proc.stdout is not None
    url = proc.stdout.readline().split()[-1]
    while True:
        try:
            with urllib.request.urlopen(f"{url}/healthz", timeout=1) as answer:
                if answer.status == 200:
                    return proc, url, time.perf_counter() - started
        except OSError:
            time.sleep(0.005)


def stop_server(proc: subprocess.Popen[str]) -> None:
    proc.send_signal(signal.SIGTERM)
    proc.wait(30)


def make_key(store: Path) -> str:
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "harness_run",
            "serve",
            "keys",
            "create",
            "--name",
            "bench",
            "--store",
            str(store),
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    return out.stdout.split()[-1]


async def turns(url: str, key: str, model_url: str, store: Path, rounds: int) -> dict[str, list[float]]:
    import harness_run
    from harness_run import AgentSpec, local

    local_engine = local.deploy(
        AgentSpec(name="bench", harness="claude-code", model=MODEL), workdir=store / "local"
    )
    remote = harness_run.connect(url, api_key=key)
    secrets = {"ANTHROPIC_BASE_URL": model_url, "ANTHROPIC_API_KEY": KEY}
    times: dict[str, list[float]] = {"local": [], "server": [], "local_first": [], "server_first": []}
    for i in range(rounds + 1):
        for name, engine in (
            (("local", local_engine), ("server", remote))
            if i % 2
            else (("server", remote), ("local", local_engine))
        ):
            session = engine.start_session()
            start = time.perf_counter()
            run = session.run(PROMPT, secrets=secrets)
            first = None
            async for _ in run:
                first = first or time.perf_counter() - start
            result = await run
            assert not result.is_error, result.error
            if i:  # the first round is a warm-up
                times[name].append(time.perf_counter() - start)
                times[f"{name}_first"].append(first or 0.0)
    await local_engine.aclose()
    await remote.aclose()
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--starts", type=int, default=3)
    args = parser.parse_args()
    from harness_run import AgentSpec

    store = scratch("server-store-")
    spec_file = store / "agent.yaml"
    spec_file.write_text(AgentSpec(name="bench", harness="claude-code", model=MODEL).to_yaml())
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
    print(f"ratio server / in process: {median(times['server']) / median(times['local']):.3f}")
    report("first event, in process", [t * 1000 for t in times["local_first"]], "ms")
    report("first event, through the server", [t * 1000 for t in times["server_first"]], "ms")
    added = (median(times["server_first"]) - median(times["local_first"])) * 1000
    print(f"first event added by the server: {added:.1f} ms")


if __name__ == "__main__":
    main()
