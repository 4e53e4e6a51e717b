"""``--variant phases``: where in a Claude Code turn harness-run's time goes, against the bare CLI.

A relay in its own process (``_relay``) sits between the CLI and the scripted model and stamps each
model request's arrival and the end of its answer. The scripted turn's two model requests cut it
into three phases:

  start   the turn's start -> the first model request   (process start-up, the CLI's own start)
  tool    the first answer's end -> the second request   (the tool call: permission, hook, command)
  tail    the last answer's end -> the turn's end        (result, the CLI's exit, the end of the turn)

``bare`` is ``claude -p`` as a user types it, timed by the caller around the process; the others
are ``await session.run()`` on a local engine with the security defaults, without the credential
guards, and without the guards and the model proxy (``HARNESS_RUN_MODEL_PROXY=0``).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

from benchmarks._cli import bare_cli_turn
from benchmarks._common import (
    PROMPT,
    REPO,
    SECURITY_VARIANTS,
    alternating,
    close_all,
    model_secrets,
    scripted_model,
    security_variant,
    security_variant_engines,
    timed_turns,
)

VARIANTS = ("bare", *SECURITY_VARIANTS)


@contextmanager
def _relay(model_url: str) -> Iterator[tuple[str, list[tuple[str, float]]]]:
    """The relay's URL and the marks it prints (appended as they come)."""
    upstream = model_url.rsplit(":", 1)[1]
    proc = subprocess.Popen(
        [sys.executable, "-m", "benchmarks.turn_cost._relay", upstream],
        stdout=subprocess.PIPE,
        text=True,
        cwd=REPO,
    )
    assert proc.stdout is not None
    first = proc.stdout.readline().split()
    if first[:1] != ["port"]:
        proc.kill()
        raise SystemExit(f"the relay did not start: {first}")
    marks: list[tuple[str, float]] = []

    def read() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            kind, at = line.split()
            marks.append((kind, float(at)))

    threading.Thread(target=read, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{first[1]}", marks
    finally:
        proc.kill()
        proc.wait()


def _phases(marks: list[tuple[str, float]], t0: float, t1: float) -> tuple[float, float, float, float]:
    def within(kind: str) -> list[float]:
        return [t for k, t in list(marks) if k == kind and t0 <= t <= t1]

    deadline = time.monotonic() + 2
    while len(within("end")) < len(within("start")) and time.monotonic() < deadline:
        time.sleep(0.01)  # the reader thread may lag the turn's end by a line
    starts, ends = within("start"), within("end")
    if len(starts) < 2 or not ends:
        raise SystemExit(f"expected two model requests in the turn, saw {len(starts)}")
    return starts[0] - t0, starts[-1] - ends[0], t1 - ends[-1], t1 - t0


async def measure(
    url: str, marks: list[tuple[str, float]], rounds: int
) -> dict[str, list[tuple[float, ...]]]:
    secrets = model_secrets(url)
    engines = security_variant_engines()
    rows: dict[str, list[tuple[float, ...]]] = {name: [] for name in VARIANTS}
    for name, measured in alternating(VARIANTS, rounds):
        t0 = time.monotonic()
        if name == "bare":
            await asyncio.to_thread(bare_cli_turn, url, PROMPT)
        else:
            with security_variant(name):
                await timed_turns(engines[name].start_session(), secrets)
        t1 = time.monotonic()
        if measured:
            rows[name].append(_phases(marks, t0, t1))
    close_all(engines)
    return rows


def run(args: argparse.Namespace) -> None:
    with scripted_model() as model_url, _relay(model_url) as (url, marks):
        rows = asyncio.run(measure(url, marks, args.rounds))
    print(f"rounds: {args.rounds} (after one warm-up), alternating; medians in ms")
    base = [statistics.median(col) for col in zip(*rows["bare"], strict=True)]
    for name in VARIANTS:
        med = [statistics.median(col) for col in zip(*rows[name], strict=True)]
        cells = "  ".join(
            f"{label} {m * 1000:.0f} ({(m - b) * 1000:+.0f})"
            for label, m, b in zip(("start", "tool", "tail", "total"), med, base, strict=True)
        )
        print(f"phases [{name}]: {cells}")
