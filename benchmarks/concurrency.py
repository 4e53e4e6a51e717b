"""Concurrent sessions on the scripted model: wall time, failures and client peak RSS.

python -m benchmarks concurrency [--sizes 16,32,64]
"""

from __future__ import annotations

import argparse
import asyncio
import resource
import time

from benchmarks._common import PROMPT, claude_spec, local_engine, model_secrets, scripted_model


async def batch(url: str, size: int) -> tuple[float, int, list[str]]:
    engine = local_engine(claude_spec("bench-concurrency"), "hr-bench-conc-")
    secrets = model_secrets(url)
    start = time.perf_counter()
    results = await asyncio.gather(
        *(engine.start_session().run(PROMPT, secrets=secrets) for _ in range(size)),
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
