"""The examples in examples/ run as documented (real claude against the scripted model)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from harness_run import AgentSpec

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


@pytest.mark.harness
def test_quickstart_runs_two_turns_offline(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "ANTHROPIC_API_KEY"}
    env["HARNESS_RUN_HOME"] = str(tmp_path)
    done = subprocess.run(
        [sys.executable, str(EXAMPLES / "quickstart.py")],
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "fibonacci(n) is in fib.py with a test; it passes." in done.stdout
    assert "Now iterative; the test still passes." in done.stdout
    assert "2 turns" in done.stdout
    (session_dir,) = (tmp_path / "sessions").iterdir()
    assert "a, b = b, a + b" in (session_dir / "workspace" / "fib.py").read_text()


@pytest.mark.harness
def test_offline_ci_example_passes(tmp_path: Path) -> None:
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "-p",
            "no:randomly",
            str(EXAMPLES / "offline_ci_test.py"),
            "--rootdir",
            str(tmp_path),
            "-o",
            "asyncio_mode=auto",
        ],
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert "1 passed" in done.stdout


@pytest.mark.parametrize("path", sorted((EXAMPLES / "specs").glob("*.yaml")), ids=lambda p: p.name)
def test_example_specs_load(path: Path) -> None:
    assert AgentSpec.from_yaml(path).name
