"""``harness-run doctor``: the real CLIs found and smoke-tested against the scripted model; a missing
or broken harness makes it exit 1 and says which and why."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from harness_run.vocab.pins import HARNESS_CLI_PINS

pytestmark = pytest.mark.harness


def doctor(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "harness_run", "doctor", *args],
        env={**os.environ, **(env or {})},
        capture_output=True,
        text=True,
        timeout=400,
        check=False,
    )


def test_every_installed_harness_passes_its_smoke_turn() -> None:
    done = doctor("--json")
    assert done.returncode == 0, done.stdout + done.stderr
    report = json.loads(done.stdout)
    assert report["ok"] is True
    assert [h["harness"] for h in report["harnesses"]] == ["claude-code", "codex", "opencode"]
    for entry in report["harnesses"]:
        assert entry["smoke"] == "passed", entry
        assert Path(entry["path"]).is_file()
        assert entry["version"]
        assert entry["pin"] == HARNESS_CLI_PINS[entry["harness"]]
    # one version per harness: each local CLI is the release the images install (Claude Code: the
    # bundled CLI of the pinned claude-agent-sdk wheel)
    assert {h["harness"]: h["version_ok"] for h in report["harnesses"]} == dict.fromkeys(
        HARNESS_CLI_PINS, True
    )


def test_a_missing_and_a_broken_harness_fail_with_a_readable_table(tmp_path: Path) -> None:
    broken = tmp_path / "opencode"
    broken.write_text(
        '#!/bin/sh\nif [ "$1" = --version ]; then echo 1.18.33; exit 0; fi\necho boom >&2; exit 7\n'
    )
    broken.chmod(0o755)
    env = {"HARNESS_RUN_CODEX_BIN": str(tmp_path / "no-codex"), "HARNESS_RUN_OPENCODE_BIN": str(broken)}
    done = doctor("--harness", "codex", "--harness", "opencode", env=env)
    assert done.returncode == 1
    lines = done.stdout.splitlines()
    assert lines[0].split()[:4] == ["HARNESS", "VERSION", "PIN", "SMOKE"]
    codex = next(line for line in lines if line.startswith("codex"))
    assert "not found" in codex
    assert "no-codex" in codex  # names the path it tried
    opencode = next(line for line in lines if line.startswith("opencode"))
    assert "1.18.33 (pinned)" in opencode
    assert "failed" in opencode
    assert "boom" in opencode or "code 7" in opencode
    assert lines[-1] == "FAILED: codex, opencode"

    report = json.loads(doctor("--json", "--no-smoke", "--harness", "codex", env=env).stdout)
    assert report["ok"] is False
    assert report["harnesses"][0]["path"] is None
    assert report["harnesses"][0]["smoke"] == "skipped"
