"""``harness-run serve`` without the ``server`` extra (aiohttp not importable, as in a base install):
one line naming the extra to install and exit code 2, never a ``ModuleNotFoundError`` traceback."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

# aiohttp made unimportable in a fresh interpreter, then the console entry point as installed
_WITHOUT_AIOHTTP = (
    "import sys\n"
    "sys.modules['aiohttp'] = None\n"
    "from harness_run.cli import main\n"
    "sys.argv = ['harness-run', *sys.argv[1:]]\n"
    "raise SystemExit(main())\n"
)


@pytest.mark.parametrize("words", [["serve"], ["serve", "keys", "list"]])
def test_serve_without_the_server_extra_names_it_in_one_line(words: list[str], tmp_path: Path) -> None:
    store = tmp_path / "store"
    done = subprocess.run(
        [sys.executable, "-c", _WITHOUT_AIOHTTP, *words, "--store", str(store)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2, done.stderr
    assert done.stderr.splitlines() == [
        'error: `harness-run serve` needs aiohttp, which is not installed: pip install "harness-run[server]"'
    ], done.stderr
    assert "Traceback" not in done.stderr + done.stdout
    assert not store.exists()  # nothing was started or written
