"""Concurrent sessions on the scripted model: wall time, failures and client peak RSS.

python benchmarks/concurrency.py [--sizes 16,32,64]
"""

from __future__ import annotations

import argparse
import asyncio
import resource
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import KEY, MODEL, scratch, scripted_model


async def batch(url: str, size: int) -> tuple[float, int, list[str]]:
    from harness_run import AgentSpec, local

    engine = local.deploy(
        AgentSpec(name="bench-concurrency", harness="claude-code", model=MODEL),
        workdir=scratch("hr-bench-conc-"),
    )
    secrets = {"ANTHROPIC_BASE_URL": url, "ANTHROPIC_API_KEY": KEY}
    start = time.perf_counter()
    results = await asyncio.gather(
        *(engine.start_session().run("write out.txt", secrets=secrets) for _ in range(size)),
        return_exceptions=True,
    )
    wall = time.perf_counter() - start
    errors = [
        str(r) if isinstance(r, BaseException) else (r.error or "")
        for r in results
        if isinstance(r, BaseException) or r.is_error
    ]
    engine.close()
    return wall, len(errors), errors[:3]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", default="16,32,64")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    with scripted_model() as url:
        for size in sizes:
            wall, failures, sample = asyncio.run(batch(url, size))
            rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
            print(
                f"{size} concurrent sessions: wall {wall:.2f} s, {wall / size:.3f} s/turn, failures {failures}, "
                f"client peak RSS {rss:.1f} MB"
            )
            for line in sample:
                print(f"  failure: {line[:300]}")


if __name__ == "__main__":
    main()
