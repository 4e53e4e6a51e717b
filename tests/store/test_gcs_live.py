"""Opt-in: the GCS history store against a real bucket (marker ``cloud``, deselected by default).

Run with ``HARNESS_RUN_CLOUD_TESTS=1 HARNESS_RUN_TEST_GCS_URL=gs://<bucket>/<prefix>`` and Application
Default Credentials that may write that bucket. Each run writes under a fresh ``live-<id>`` prefix.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.cloud


def test_a_round_trip_against_a_real_bucket() -> None:
    url = os.environ.get("HARNESS_RUN_TEST_GCS_URL", "")
    if not url.startswith("gs://"):
        pytest.skip(
            "set HARNESS_RUN_TEST_GCS_URL=gs://<bucket>/<prefix> (and credentials) for the live GCS test"
        )
    env = {k: v for k, v in os.environ.items() if k != "STORAGE_EMULATOR_HOST"}  # the real service
    out = subprocess.run(
        [sys.executable, str(Path(__file__).with_name("live_check.py")), url],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.startswith("ok gs://")
