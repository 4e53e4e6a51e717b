"""Audit → plan → apply for ``harness-run-gcp-setup``: run each step's read-only audit, show what is
missing, apply only that (after confirmation, or with ``--yes``), then audit again."""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal, TextIO

from harness_run.gcp._plan import Step

__all__ = ["Audit", "Outcome", "apply_step", "audit_step", "render"]

Outcome = Literal["done", "missing", "blocked", "unknown"]
Runner = Callable[[Sequence[str], str | None], "subprocess.CompletedProcess[str]"]


@dataclass(slots=True)
class Audit:
    step: Step
    outcome: Outcome
    detail: str = ""


def run_command(argv: Sequence[str], stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    """Run one gcloud/kubectl command (no shell, output captured; stdin is ``stdin`` or closed)."""
    if shutil.which(argv[0]) is None:
        return subprocess.CompletedProcess(
            list(argv), 127, "", f"{argv[0]} is not installed (see the GCP setup docs for prerequisites)"
        )
    try:
        if stdin is not None:
            return subprocess.run(
                list(argv), capture_output=True, text=True, input=stdin, timeout=1800, check=False
            )
        return subprocess.run(
            list(argv), capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=1800, check=False
        )
    except subprocess.TimeoutExpired:
        return subprocess.CompletedProcess(list(argv), 124, "", f"{argv[0]} did not finish in 30 minutes")


def fill(argv: Sequence[str], values: dict[str, str]) -> list[str]:
    return [a.format(**values) if "{" in a else a for a in argv]


def audit_step(step: Step, values: dict[str, str], blocked: set[str], run: Runner = run_command) -> Audit:
    """``done`` when the audit passes; ``blocked`` when a step it needs is not done."""
    missing_needs = [n for n in step.needs if n in blocked]
    if missing_needs:
        return Audit(step, "blocked", f"waits for: {', '.join(missing_needs)}")
    result = run(fill(step.audit, values), None)
    if result.returncode == 127:
        return Audit(step, "unknown", result.stderr.strip())
    if result.returncode != 0:
        return Audit(step, "missing", _last_line(result.stderr))
    if step.expect is not None:
        wanted = fill([step.expect], values)[0].split("\n")
        absent = [w for w in wanted if w not in result.stdout]
        if absent:
            return Audit(step, "missing", f"not yet: {', '.join(absent)}")
    if step.forbid is not None:
        unwanted = fill([step.forbid], values)[0]
        if unwanted in result.stdout:
            return Audit(step, "missing", f"still there: {unwanted}")
    if step.key == "project":
        values["project_number"] = result.stdout.strip()
    return Audit(step, "done")


def apply_step(step: Step, values: dict[str, str], out: TextIO, run: Runner = run_command) -> str | None:
    """Run the step's commands; the error text of the first that fails, else None."""
    for argv in step.apply:
        argv = fill(argv, values)
        out.write(f"    $ {_command(argv, step.stdin)}\n")
        out.flush()
        result = run(argv, step.stdin)
        if result.returncode != 0:
            return f"`{_shell(argv)}` failed (exit {result.returncode}): {_last_line(result.stderr)}"
    return None


def render(audits: Sequence[Audit], values: dict[str, str], out: TextIO = sys.stdout) -> None:
    marks = {"done": "ok  ", "missing": "TODO", "blocked": "TODO", "unknown": "??  "}
    for i, a in enumerate(audits, 1):
        out.write(f"[{i:2}/{len(audits)}] {marks[a.outcome]} {a.step.title} — {a.step.why}\n")
        if a.detail and a.outcome != "done":
            out.write(f"         {a.detail}\n")
        if a.outcome != "done":
            for argv in a.step.apply:
                out.write(f"         $ {_command(fill(argv, values), a.step.stdin)}\n")


def _shell(argv: Sequence[str]) -> str:
    import shlex

    return " ".join(shlex.quote(a) for a in argv)


def _command(argv: Sequence[str], stdin: str | None) -> str:
    """The command as a shell would take it (with its input as a here-document)."""
    if stdin is None:
        return _shell(argv)
    return f"{_shell(argv)} <<'EOF'\n{stdin}\nEOF"


def _last_line(text: str) -> str:
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return lines[-1][:300] if lines else "no output"
