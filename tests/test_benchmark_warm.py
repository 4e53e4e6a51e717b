"""Smoke test of ``benchmarks/warm_turns.py``: one round through the runner prints every ratio, the
checks that the turns ran on the kept processes, and the final table (numbers are not asserted
against targets here; they are recorded in benchmarks/results/)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


@pytest.mark.harness
@pytest.mark.slow
def test_warm_turns_benchmark_prints_its_ratios() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks", "warm_turns", "--rounds", "1"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    out = done.stdout
    assert done.returncode == 0, out[-2000:] + done.stderr[-2000:]
    for label in (
        "two-turn warm / bare",
        "two-turn idle_ttl=0 / bare",
        "first turn warm_pool=1 / bare turn",
        "first turn no pool / bare turn",
        "served first turn (pooled) / bare turn",
        "served second turn (parked) / bare turn",
    ):
        assert re.search(rf"^ratio {re.escape(label)}: \d+\.\d{{3}}", out, re.MULTILINE), out
        assert re.search(rf"^{re.escape(label)} +\d+\.\d{{3}} ", out, re.MULTILINE), out  # the table
    # the kept processes really took the turns (pids checked), in the one measured round
    for check in (
        "warm: second turn on the parked process",
        "pooled: first turn on the pooled process",
        "served: first turn on the pooled process",
        "served: second turn on the parked process",
    ):
        assert f"check, {check}: 1/1" in out, out
    assert re.search(r"^metric +value +target +met\?$", out, re.MULTILINE), out
