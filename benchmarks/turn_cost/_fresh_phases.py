"""``--variant fresh-phases``: where a fresh ``harness-run run`` spends its own time: start -> the
``claude`` exec, and the ``claude`` exit -> the process exit (everything else is the CLI's turn).
Less sensitive to a noisy VM than the whole-turn ratio, since the CLI's own run time drops out.

``claude`` is replaced by a wrapper script that stamps both moments (``HARNESS_RUN_CLAUDE_BIN``).
With ``--baseline DIR`` (a copy of an older ``harness_run`` package, e.g. from ``git archive``), the
two alternate and both are printed.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from benchmarks._cli import claude_binary
from benchmarks._common import KEY, MODEL, PROMPT, alternating, scratch, scripted_model

ENTRY = "import sys; from harness_run.cli import main; sys.exit(main())"  # what the console script runs


def _wrapper(stamps: Path) -> Path:
    script = scratch("wrap-") / "claude"
    script.write_text(
        "#!/bin/bash\n"
        f"date +%s.%N > {stamps}/exec\n"
        f'{claude_binary()} "$@"\nrc=$?\n'
        f"date +%s.%N > {stamps}/end\nexit $rc\n"
    )
    script.chmod(0o755)
    return script


def one(
    url: str, spec: Path, wrapper: Path, stamps: Path, pythonpath: str | None, workdir: Path
) -> tuple[float, float, float]:
    env = {
        **os.environ,
        "HARNESS_RUN_CLAUDE_BIN": str(wrapper),
        "HARNESS_RUN_HOME": str(workdir),
        "ANTHROPIC_BASE_URL": url,
        "ANTHROPIC_API_KEY": KEY,
    }
    if pythonpath:
        env["PYTHONPATH"] = pythonpath
    argv = [sys.executable, "-c", ENTRY, "run", str(spec), PROMPT, "--json"]
    start = time.time()
    done = subprocess.run(  # cwd: not the checkout, whose harness_run would shadow --baseline's
        argv, env=env, capture_output=True, text=True, stdin=subprocess.DEVNULL, check=False, cwd=workdir
    )
    end = time.time()
    if done.returncode != 0:
        raise SystemExit(f"harness-run run failed: {done.stderr[-400:]}")
    spawned, exited = (float((stamps / name).read_text()) for name in ("exec", "end"))
    return spawned - start, end - exited, end - start


def run(args: argparse.Namespace) -> None:
    stamps = scratch("stamps-")
    wrapper = _wrapper(stamps)
    spec = scratch("spec-") / "spec.yaml"
    spec.write_text(f"name: bench\nharness: claude-code\nmodel: {MODEL}\n")
    variants = {"current": None} | ({"baseline": args.baseline} if args.baseline else {})
    results: dict[str, list[tuple[float, float, float]]] = {name: [] for name in variants}
    # one workdir per variant, as a user's: the warm-up round writes the launch-plan cache
    workdirs = {name: scratch("wd-") for name in variants}
    with scripted_model() as url:
        for name, measured in alternating(list(variants), args.rounds):
            sample = one(url, spec, wrapper, stamps, variants[name], workdirs[name])
            if measured:
                results[name].append(sample)
    for name, samples in results.items():
        pre, post, total = (statistics.median(column) for column in zip(*samples, strict=True))
        print(
            f"{name}: start -> claude exec {pre * 1000:.0f} ms, claude exit -> process exit "
            f"{post * 1000:.0f} ms, whole run {total:.2f} s (median of {len(samples)})"
        )
