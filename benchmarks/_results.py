"""The recorded runs (``benchmarks/results/<benchmark>.json``) and RESULTS.md, written from them.

``python -m benchmarks results`` writes RESULTS.md: for each benchmark one table of its current
figures — each measure's most recent recorded value, the aim, and the run it comes from (date, load,
the command). ``--check`` only says whether RESULTS.md is up to date (exit 1 if not).

A results file holds a benchmark's ``measures`` (what each value key means: label, unit, aim) and its
``runs``, oldest first: one entry per recorded run, with the date, the command (as the runner takes
it; ``recorded_as`` where the run was made with an older script), the load average, the ``values``
taken from it and its ``tables`` and ``notes`` as written at the time. To record a run: add an entry
at the end of the file, then ``python -m benchmarks results`` and ``python -m benchmarks charts``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

HERE = Path(__file__).resolve().parent
RESULTS_DIR = HERE / "results"
RESULTS_MD = HERE / "RESULTS.md"


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class Measure(_Frozen):
    label: str
    unit: str
    """ms, s, µs, MB, KB, ratio, count, files: a ratio and a count print without a unit."""
    aim: str | None = None


class Table(_Frozen):
    columns: list[str]
    rows: list[list[str]]


class Run(_Frozen):
    date: str = Field(pattern=r"^\d{4}-\d{2}-\d{2}$")
    time: str | None = None
    title: str
    variant: str = ""
    command: str | None
    """The command that makes the run again (None: measured by hand, or by the tests)."""
    recorded_as: str | None = None
    load: str | None = None
    commit: str | None = None
    machine: str | None = None
    """When not the file's machine."""
    values: dict[str, float | str] = {}
    tables: list[Table] = []
    notes: list[str] = []

    @property
    def when(self) -> str:
        return f"{self.date} {self.time}" if self.time else self.date


class Results(_Frozen):
    benchmark: str
    about: str
    machine: str
    measures: dict[str, Measure] = {}
    runs: list[Run]

    def model_post_init(self, context: object, /) -> None:
        for run in self.runs:
            unknown = sorted(set(run.values) - set(self.measures))
            if unknown:
                raise ValueError(f"{self.benchmark}: run of {run.when}: values {unknown} are not in measures")

    def latest(self) -> dict[str, tuple[float | str, int]]:
        """Each measure's most recent value and the index of its run."""
        found: dict[str, tuple[float | str, int]] = {}
        for index, run in enumerate(self.runs):
            for key, value in run.values.items():
                found[key] = (value, index)
        return found


def load_all(folder: Path = RESULTS_DIR) -> list[Results]:
    """Every results file of ``folder``, by benchmark name."""
    return [
        Results.model_validate_json(path.read_text(encoding="utf-8"))
        for path in sorted(folder.glob("*.json"))
    ]


def shown(value: float | str, unit: str) -> str:
    """A value with its unit: ``4.6 ms``, ``1.035`` (a ratio), a range as recorded."""
    text = f"{value:g}" if isinstance(value, float) else str(value)
    return text if unit in ("ratio", "count") else f"{text} {unit}"


INTRO = """\
# Benchmark results

The current figures of each benchmark: every measure's most recent recorded value, its aim where it
has one, and the run it comes from (date, load average, the command that makes it again). Every
recorded run — its tables and notes as written at the time, since the first — is in
[`results/`](results/) (one JSON file per benchmark, one entry per run); the main series are drawn in
the documentation (docs/benchmarks.md).

Written by `python -m benchmarks results` from those files (do not edit it by hand): record a run at
the end of its file, then run `python -m benchmarks results` and `python -m benchmarks charts`.

Machine, unless a run says otherwise: {machine}.

Timings on this VM vary by ±15 % from run to run; each figure is a median. Under load (other test
runs on the 2 cores), read wall times as upper bounds. Run a benchmark with `python -m benchmarks NAME [ARGS]` (`make bench NAME=... ARGS=...`);
`python -m benchmarks` lists them.
"""


def render(all_results: list[Results]) -> str:
    machine = all_results[0].machine if all_results else "(none recorded)"
    out = [INTRO.format(machine=machine)]
    for results in all_results:
        if results.benchmark == "probes":
            continue
        out.append(_section(results))
    probes = [r for r in all_results if r.benchmark == "probes"]
    if probes:
        out.append(
            "## Other measurements\n\n"
            + probes[0].about
            + " Kept in `results/probes.json`: "
            + "; ".join(f"{run.title} ({run.when})" for run in probes[0].runs)
            + ".\n"
        )
    return "\n".join(out)


def _section(results: Results) -> str:
    lines = [f"## {results.benchmark}", "", results.about, ""]
    latest = results.latest()
    if not latest:
        run = results.runs[-1]
        lines += [f"No values recorded; the latest run ({run.when}, `{run.command}`):", ""]
        lines += [*run.notes, ""]
        return "\n".join(lines)
    cited: dict[int, int] = {}  # run index -> its number in this section
    rows = ["| measure | value | aim | run |", "| --- | --- | --- | --- |"]
    for key, measure in results.measures.items():
        if key not in latest:
            continue
        value, index = latest[key]
        number = cited.setdefault(index, len(cited) + 1)
        rows.append(f"| {measure.label} | {shown(value, measure.unit)} | {measure.aim or ''} | ({number}) |")
    lines += [*rows, "", "Runs:", ""]
    for index, number in sorted(cited.items(), key=lambda item: item[1]):
        lines.append(f"{number}. {_cite(results, results.runs[index])}")
    return "\n".join(lines) + "\n"


def _cite(results: Results, run: Run) -> str:
    parts = [run.when]
    if run.load:
        parts.append(f"load average {run.load}" if run.load[0] in "0123456789~<" else run.load)
    if run.commit:
        parts.append(f"at {run.commit}")
    if run.machine:
        parts.append(run.machine)
    said = ", ".join(parts)
    command = f"`{run.command}`" if run.command else "by hand"
    if run.recorded_as:
        command += f" (run as `{run.recorded_as}`)"
    return f"{said}: {command} — {run.title.split(' / ')[0]}"


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks results", description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only check that RESULTS.md is up to date")
    args = parser.parse_args()
    text = render(load_all())
    if args.check:
        if RESULTS_MD.read_text(encoding="utf-8") != text:
            sys.exit("RESULTS.md is not what results/*.json say: run `python -m benchmarks results`")
        return
    RESULTS_MD.write_text(text, encoding="utf-8")
    print(f"wrote {RESULTS_MD.relative_to(HERE.parent)}")


if __name__ == "__main__":
    main()
