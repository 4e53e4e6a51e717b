"""Smoke test of ``benchmarks/approvals.py``: it runs one round in process and through a server and
prints its numbers (recorded in benchmarks/RESULTS.md, never asserted against the targets here)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parent.parent / "benchmarks"


@pytest.mark.harness
@pytest.mark.slow
def test_approvals_benchmark_prints_the_round_trip() -> None:
    done = subprocess.run(
        [sys.executable, str(BENCH / "approvals.py"), "--rounds", "1"],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    for where in ("local", "server"):
        for label in (r"unmatched - none: [-+][0-9.]+ ms", r"request -> decided: [0-9.]+ ms"):
            assert re.search(rf"^{where} {label}$", done.stdout, re.MULTILINE), done.stdout
        assert re.search(
            rf"^{where} approval round trip \(approve - none\): [-+][0-9.]+ ms", done.stdout, re.M
        )
