"""``harness-run run`` with OpenTelemetry configured by environment variables (the ``otel`` extra):
the console script in a fresh process, real ``claude`` against the scripted model, spans written as
JSON lines (``HARNESS_RUN_OTEL_FILE``) — they must all be there although the command ends with
``os._exit``, in one trace under the command's root span, and hold no secret value."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from runtime._helpers import run_console
from testkit.otel import read_span_lines

from harness_run.testing import ScriptedModel, shell, text

pytestmark = pytest.mark.harness

CANARY = "canary-5d0c8a7e31f94b26"


def test_run_exports_one_trace_from_the_environment(scripted_model: ScriptedModel, tmp_path: Path) -> None:
    spec = tmp_path / "spec.yaml"
    spec.write_text(
        "name: cli-traced\nharness: claude-code\nmodel: claude-sonnet-4-6\nsecrets:\n  - name: CANARY\n"
    )
    scripted_model.add(shell("echo $CANARY"), text(f"said {CANARY}"))
    spans_file = tmp_path / "spans.jsonl"
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("OTEL_")},
        "ANTHROPIC_BASE_URL": scripted_model.url,
        "ANTHROPIC_API_KEY": "scripted-key",
        "CANARY": CANARY,
        "HARNESS_RUN_HOME": str(tmp_path / "home"),
        "HARNESS_RUN_OTEL_FILE": str(spans_file),
        "OTEL_SERVICE_NAME": "cli-under-test",
    }
    code, _events, stderr = run_console(["run", str(spec), "show it", "--secret", "CANARY", "--json"], env)
    assert code == 0, stderr
    spans = read_span_lines(spans_file)
    names = {s["name"] for s in spans}
    assert {"harness-run run", "harness_run.turn", "harness_run.harness", "harness_run.tool"} <= names
    assert len({s["context"]["trace_id"] for s in spans}) == 1
    [root] = [s for s in spans if s["name"] == "harness-run run"]
    [turn] = [s for s in spans if s["name"] == "harness_run.turn"]
    assert root["parent_id"] is None and turn["parent_id"] == root["context"]["span_id"]
    assert turn["attributes"]["harness_run.engine"] == "cli-traced"
    assert {s["resource"]["attributes"]["service.name"] for s in spans} == {"cli-under-test"}
    assert CANARY not in json.dumps(spans)


def test_without_otel_variables_nothing_is_written(scripted_model: ScriptedModel, tmp_path: Path) -> None:
    spec = tmp_path / "spec.yaml"
    spec.write_text("name: cli-plain\nharness: claude-code\nmodel: claude-sonnet-4-6\n")
    scripted_model.add(text("plain"))
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "HARNESS_RUN_OTEL"))},
        "ANTHROPIC_BASE_URL": scripted_model.url,
        "ANTHROPIC_API_KEY": "scripted-key",
        "HARNESS_RUN_HOME": str(tmp_path / "home"),
        "PYTHONWARNINGS": "error::ResourceWarning",
    }
    code = (
        "import sys\n"
        "from harness_run.cli._main import main\nrc = main(['run', sys.argv[1], 'hi'])\n"
        "print(sorted(m for m in sys.modules if m.startswith('opentelemetry'))); sys.exit(rc)"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, str(spec)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == "[]"
