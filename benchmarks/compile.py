"""Compile and import timings, one labelled number per line.

    python -m benchmarks compile [--runs N]

- compile_ms: median of N ``compile(spec)`` calls for a spec without git skills (aim: < 50 ms);
  the first call (which imports jinja2 and reads the templates) is reported separately.
- import_agentspec_ms: ``from harness_run import AgentSpec`` in a fresh interpreter (aim: < 150 ms).
- import_build_ms: ``import harness_run.compiler`` in a fresh interpreter.

Imports are timed after ``python -m compileall -q harness_run``: machines that set
PYTHONDONTWRITEBYTECODE=1 would otherwise recompile the library in every subprocess.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from benchmarks._common import compile_package, import_ms


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--runs", type=int, default=20, help="compile runs (default: %(default)s)")
    parser.add_argument(
        "--import-runs", type=int, default=7, help="fresh-interpreter runs (default: %(default)s)"
    )
    args = parser.parse_args()

    compile_package(check=True)
    from harness_run import AgentSpec, McpServer, SkillSource
    from harness_run.compiler import compile

    with tempfile.TemporaryDirectory() as tmp:
        skill = Path(tmp, "skills", "triage")
        skill.mkdir(parents=True)
        (skill / "SKILL.md").write_text("---\nname: triage\n---\nFix failing tests.\n")
        spec = AgentSpec(
            name="bench-agent",
            harness="claude-code",
            model="claude-sonnet-4-6",
            extra_harnesses=("codex",),
            skills=(SkillSource.local("skills/triage"),),
            mcp_servers=(McpServer.github(), McpServer.stdio("fs", "npx", ["-y", "server-fs"])),
            packages=("httpx>=0.27", "beautifulsoup4"),
            network=["pypi.org", "*.github.com"],
        )
        start = time.perf_counter()
        plan = compile(spec, base_dir=tmp)
        first = (time.perf_counter() - start) * 1000
        samples = []
        for _ in range(args.runs):
            start = time.perf_counter()
            compile(spec, base_dir=tmp)
            samples.append((time.perf_counter() - start) * 1000)

    print(f"compile_first_ms {first:.1f}")
    print(f"compile_ms {statistics.median(samples):.1f}")
    print(f"compile_files {len(plan.files)}")
    print(f"import_agentspec_ms {import_ms('from harness_run import AgentSpec', args.import_runs):.1f}")
    print(f"import_build_ms {import_ms('import harness_run.compiler', args.import_runs):.1f}")


if __name__ == "__main__":
    main()
