"""The recorded runs' main series as SVG charts for the documentation (docs/benchmarks/*.svg).

``python -m benchmarks charts [--out DIR]`` draws each chart of :data:`CHARTS` from
``benchmarks/results/*.json`` (hand-written SVG: no plotting library). ``--check``: only say whether
the files in docs/benchmarks/ are what the results draw (exit 1 if not). A chart is either a series
over the runs (one line per measure, a point per run that recorded it) or the bars of one run (the
latest that recorded its measures).
"""

from __future__ import annotations

import argparse
import math
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from xml.sax.saxutils import escape

from benchmarks._results import Results, Run, load_all

DOCS = Path(__file__).resolve().parent.parent / "docs" / "benchmarks"
WIDTH, HEIGHT = 760, 380
LEFT, RIGHT, TOP, BOTTOM = 64, 20, 72, 92
COLORS = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b")
INK, GRID = "#333333", "#dddddd"


@dataclass(frozen=True)
class Chart:
    file: str
    benchmark: str
    title: str
    kind: str
    """``series``: each measure over the runs; ``bars``: groups of measures, from the latest run."""
    series: tuple[tuple[str, str], ...]
    """(value key, legend label); for bars, a key may hold ``{group}`` (filled from ``groups``)."""
    unit: str
    groups: tuple[tuple[str, str], ...] = ()
    """bars: (key part, label) of each group along the x axis."""
    reference: float | None = None
    """A horizontal line (the bare CLI's 1.0, say)."""
    stacked: bool = False
    total: str | None = None
    """stacked bars: the key of the recorded total printed on top (a median of totals is not the sum
    of the parts' medians)."""


CHARTS = (
    Chart(
        "turn-cost-ratios.svg",
        "turn_cost",
        "A Claude Code turn, harness-run / the bare CLI (medians; lower is better, 1.0 = the bare CLI)",
        "series",
        (
            ("same_flags", "in process / bare, same flags"),
            ("plain", "in process / plain claude -p"),
            ("fresh", "fresh harness-run run / claude -p"),
            ("two_turn", "two-turn session / -p + --resume"),
        ),
        "ratio",
        reference=1.0,
    ),
    Chart(
        "fresh-run-start.svg",
        "turn_cost",
        "A fresh harness-run run: its own time before the claude exec and after its exit",
        "series",
        (("fresh_start_ms", "start -> claude exec"), ("fresh_exit_ms", "claude exit -> process exit")),
        "ms",
    ),
    Chart(
        "turn-phases.svg",
        "turn_cost",
        "Where a turn's time goes, phase by phase (ms, medians of the latest run)",
        "bars",
        (("phase_start_{group}", "start"), ("phase_tool_{group}", "tool"), ("phase_tail_{group}", "tail")),
        "ms",
        groups=(
            ("bare", "bare claude -p"),
            ("defaults", "defaults"),
            ("no_guards", "no credential guards"),
            ("no_proxy", "no guards, no proxy"),
        ),
        stacked=True,
        total="phase_total_{group}",
    ),
    Chart(
        "hook-kinds.svg",
        "turn_cost",
        "What a PreToolUse hook costs a Claude Code turn, by kind (/ no hook, latest run)",
        "bars",
        (("hook_{group}", "wall"), ("hook_{group}_cpu", "CPU")),
        "ratio",
        groups=(
            ("http", "HTTP"),
            ("http_other_tool", "HTTP, never matches"),
            ("command_true", "command true"),
            ("command_client", "harness-run's client"),
        ),
        reference=1.0,
    ),
    Chart(
        "guard-per-tool-call.svg",
        "model_proxy",
        "The credential guard per tool call, p50 (ms)",
        "series",
        (("guard_hook_p50_ms", "command hook"), ("guard_http_p50_ms", "HTTP hook (Claude Code)")),
        "ms",
    ),
    Chart(
        "provider-hops.svg",
        "provider_hops",
        "Sandbox providers side by side: p50 of each hop (ms, latest run)",
        "bars",
        (
            ("{group}_e2b", "e2b-double"),
            ("{group}_daytona", "daytona-double"),
            ("{group}_sandbox", "agent-sandbox"),
            ("{group}_docker", "docker"),
        ),
        "ms",
        groups=(
            ("claim", "claim -> first event"),
            ("idle", "idle -> back -> first event"),
            ("redeploy", "no-op redeploy"),
        ),
    ),
)


def _number(value: float | str | None) -> float | None:
    return value if isinstance(value, float) else None


def _ticks(low: float, high: float) -> list[float]:
    """About five round ticks covering low..high."""
    span = high - low or abs(high) or 1.0
    raw = span / 5
    step = 10 ** math.floor(math.log10(raw))
    step *= next(m for m in (1, 2, 2.5, 5, 10) if raw <= m * step)
    start = math.floor(low / step) * step
    ticks: list[float] = []
    value = start
    while value <= high + step * 1e-9:
        ticks.append(round(value, 10))
        value += step
    if ticks[-1] < high:
        ticks.append(round(ticks[-1] + step, 10))
    return ticks


def _label(value: float) -> str:
    return f"{value:g}"


def _loaded(run: Run) -> bool:
    """Whether the run's load average reached 5 (other test runs on the 2 cores)."""
    numbers = [float(n) for n in re.findall(r"\d+(?:\.\d+)?", run.load or "")]
    return bool(numbers) and max(numbers) >= 5


def _run_label(run: Run) -> str:
    day = run.date[5:]
    return f"{day} {run.time}" if run.time else day


class _Svg:
    def __init__(self, title: str) -> None:
        self.parts = [
            f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" '
            f'viewBox="0 0 {WIDTH} {HEIGHT}" font-family="sans-serif" font-size="12">',
            f"<title>{escape(title)}</title>",
            f'<rect width="{WIDTH}" height="{HEIGHT}" rx="6" fill="#ffffff"/>',
            f'<text x="{LEFT}" y="22" font-size="14" fill="{INK}">{escape(title)}</text>',
        ]

    def add(self, element: str) -> None:
        self.parts.append(element)

    def text(self, x: float, y: float, words: str, anchor: str = "start", extra: str = "") -> None:
        self.add(
            f'<text x="{x:.1f}" y="{y:.1f}" text-anchor="{anchor}" fill="{INK}"{extra}>{escape(words)}</text>'
        )

    def legend(self, labels: list[str]) -> None:
        x, y = LEFT, 34
        for index, label in enumerate(labels):
            width = 28 + 6.6 * len(label)
            if x + width > WIDTH - RIGHT and x > LEFT:
                x, y = LEFT, y + 16
            color = COLORS[index % len(COLORS)]
            self.add(f'<rect x="{x:.1f}" y="{y}" width="12" height="12" fill="{color}"/>')
            self.text(x + 16, y + 10, label)
            x += width

    def y_axis(self, ticks: list[float], unit: str) -> tuple[float, float]:
        """Grid lines and labels; the y of the lowest and highest tick."""
        low, high = ticks[0], ticks[-1]
        for tick in ticks:
            y = self.y(tick, low, high)
            self.add(f'<line x1="{LEFT}" y1="{y:.1f}" x2="{WIDTH - RIGHT}" y2="{y:.1f}" stroke="{GRID}"/>')
            self.text(LEFT - 6, y + 4, _label(tick), "end")
        middle = TOP + (HEIGHT - TOP - BOTTOM) / 2
        self.text(16, middle, unit, "middle", f' transform="rotate(-90 16 {middle:.1f})"')
        return low, high

    @staticmethod
    def y(value: float, low: float, high: float) -> float:
        return HEIGHT - BOTTOM - (value - low) / (high - low or 1) * (HEIGHT - TOP - BOTTOM)

    def close(self) -> str:
        return "\n".join([*self.parts, "</svg>", ""])


def series_chart(chart: Chart, results: Results) -> str:
    runs = [
        run
        for run in results.runs
        if any(_number(run.values.get(key)) is not None for key, _ in chart.series)
    ]
    values = [v for run in runs for key, _ in chart.series if (v := _number(run.values.get(key))) is not None]
    svg = _Svg(chart.title)
    svg.legend([label for _, label in chart.series])
    if not values:
        svg.text(WIDTH / 2, HEIGHT / 2, "no recorded values", "middle")
        return svg.close()
    bottom = min([*values, chart.reference or min(values)])
    low, high = svg.y_axis(
        _ticks(0 if bottom >= 0 and chart.unit != "ratio" else bottom, max(values)), chart.unit
    )
    step = (WIDTH - LEFT - RIGHT) / max(1, len(runs))
    xs = [LEFT + step * (i + 0.5) for i in range(len(runs))]
    if any(_loaded(run) for run in runs):
        svg.text(
            WIDTH - RIGHT,
            HEIGHT - 6,
            "hollow: a loaded machine (load average 5 or more)",
            "end",
            ' font-size="10"',
        )
    for x, run in zip(xs, runs, strict=True):
        svg.text(
            x,
            HEIGHT - BOTTOM + 14,
            _run_label(run),
            "end",
            f' transform="rotate(-40 {x:.1f} {HEIGHT - BOTTOM + 14})"',
        )
    if chart.reference is not None:
        y = svg.y(chart.reference, low, high)
        svg.add(
            f'<line x1="{LEFT}" y1="{y:.1f}" x2="{WIDTH - RIGHT}" y2="{y:.1f}" stroke="{INK}" stroke-dasharray="4 3"/>'
        )
    for index, (key, _) in enumerate(chart.series):
        color = COLORS[index % len(COLORS)]
        points = [
            (x, svg.y(v, low, high), v, _loaded(run))
            for x, run in zip(xs, runs, strict=True)
            if (v := _number(run.values.get(key))) is not None
        ]
        if len(points) > 1:
            path = " ".join(f"{x:.1f},{y:.1f}" for x, y, _, _ in points)
            svg.add(f'<polyline points="{path}" fill="none" stroke="{color}" stroke-width="1.5"/>')
        for x, y, v, loaded in points:
            fill = "#ffffff" if loaded else color
            svg.add(
                f'<circle cx="{x:.1f}" cy="{y:.1f}" r="3.5" fill="{fill}" stroke="{color}" stroke-width="1.5">'
                f"<title>{_label(v)}</title></circle>"
            )
    return svg.close()


def bars_chart(chart: Chart, results: Results) -> str:
    keys = [key.format(group=group) for group, _ in chart.groups for key, _ in chart.series]
    run = next((r for r in reversed(results.runs) if any(k in r.values for k in keys)), None)
    svg = _Svg(chart.title + (f", {_run_label(run)}" if run else ""))
    svg.legend([label for _, label in chart.series])
    if run is None:
        svg.text(WIDTH / 2, HEIGHT / 2, "no recorded values", "middle")
        return svg.close()

    def value(key: str, group: str) -> float:
        return _number(run.values.get(key.format(group=group))) or 0.0

    tops = [
        sum(value(k, g) for k, _ in chart.series)
        if chart.stacked
        else max(value(k, g) for k, _ in chart.series)
        for g, _ in chart.groups
    ]
    floor = 0.0
    if chart.reference is not None:  # ratios: start near the smallest, so the differences show
        smallest = min(value(k, g) for g, _ in chart.groups for k, _ in chart.series)
        floor = math.floor(min(smallest, chart.reference) * 20) / 20 - 0.05
    low, high = svg.y_axis(_ticks(floor, max(tops)), chart.unit)
    group_width = (WIDTH - LEFT - RIGHT) / len(chart.groups)
    bars = 1 if chart.stacked else len(chart.series)
    bar_width = min(48.0, group_width * 0.7 / bars)
    for gi, (group, label) in enumerate(chart.groups):
        center = LEFT + group_width * (gi + 0.5)
        svg.text(center, HEIGHT - BOTTOM + 16, label, "middle")
        base = low
        for si, (key, _) in enumerate(chart.series):
            v = value(key, group)
            color = COLORS[si % len(COLORS)]
            if chart.stacked:
                x, y0, y1 = center - bar_width / 2, svg.y(base, low, high), svg.y(base + v, low, high)
                base += v
            else:
                x = center - bars * bar_width / 2 + si * bar_width
                y0, y1 = svg.y(low, low, high), svg.y(v, low, high)
            svg.add(
                f'<rect x="{x:.1f}" y="{y1:.1f}" width="{bar_width - 2:.1f}" height="{max(0.0, y0 - y1):.1f}" '
                f'fill="{color}"><title>{_label(v)}</title></rect>'
            )
            if not chart.stacked:
                svg.text(x + (bar_width - 2) / 2, y1 - 4, _label(v), "middle", ' font-size="10"')
        if chart.stacked:
            total = value(chart.total, group) if chart.total else base
            svg.text(
                center, svg.y(base, low, high) - 4, f"total {_label(total)}", "middle", ' font-size="10"'
            )
    if chart.reference is not None:
        y = svg.y(chart.reference, low, high)
        svg.add(
            f'<line x1="{LEFT}" y1="{y:.1f}" x2="{WIDTH - RIGHT}" y2="{y:.1f}" stroke="{INK}" stroke-dasharray="4 3"/>'
        )
    return svg.close()


def draw_all(all_results: list[Results]) -> dict[str, str]:
    """Each chart's file name and SVG text."""
    by_name = {results.benchmark: results for results in all_results}
    drawn: dict[str, str] = {}
    for chart in CHARTS:
        results = by_name.get(chart.benchmark)
        if results is None:
            continue
        draw = series_chart if chart.kind == "series" else bars_chart
        drawn[chart.file] = draw(chart, results)
    return drawn


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks charts", description=__doc__.splitlines()[0])
    parser.add_argument(
        "--out", type=Path, default=DOCS, help="where to write them (default: docs/benchmarks)"
    )
    parser.add_argument("--check", action="store_true", help="only check the files in --out are up to date")
    args = parser.parse_args()
    drawn = draw_all(load_all())
    if args.check:
        stale = [
            name
            for name, text in drawn.items()
            if not (args.out / name).is_file() or (args.out / name).read_text() != text
        ]
        if stale:
            sys.exit(
                f"{', '.join(stale)} in {args.out} are not what results/*.json draw: run `python -m benchmarks charts`"
            )
        return
    args.out.mkdir(parents=True, exist_ok=True)
    for name, text in drawn.items():
        (args.out / name).write_text(text, encoding="utf-8")
        print(f"wrote {args.out / name}")


if __name__ == "__main__":
    main()
