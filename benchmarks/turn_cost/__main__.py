"""``python -m benchmarks turn_cost``: parse the options, run the chosen variant."""

from __future__ import annotations

import argparse
from collections.abc import Callable

from benchmarks._common import HARNESS_MODELS
from benchmarks.turn_cost import _attribution, _fresh_phases, _hook_kinds, _overview, _phases

# each variant: what runs it, its default --rounds
VARIANTS: dict[str, tuple[Callable[[argparse.Namespace], None], int]] = {
    "overview": (_overview.overview, 7),
    "fresh-process": (_overview.fresh_only, 7),
    "two-turn": (_overview.two_turn_only, 7),
    "phases": (_phases.run, 20),
    "fresh-phases": (_fresh_phases.run, 7),
    "attribution": (_attribution.run, 7),
    "hook-kinds": (_hook_kinds.run, 25),
}


def main() -> None:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks turn_cost", description="What a turn costs (see the module's docstring)."
    )
    parser.add_argument("--variant", choices=list(VARIANTS), default="overview")
    parser.add_argument("--rounds", type=int, help="measured rounds (default: per variant, 7-25)")
    parser.add_argument("--smoke", action="store_true", help="one round (CI smoke test)")
    parser.add_argument(
        "--harness", action="append", choices=list(HARNESS_MODELS), help="overview: default all"
    )
    parser.add_argument(
        "--opencode-rounds", type=int, default=3, help="overview: OpenCode's rounds (its turns take seconds)"
    )
    parser.add_argument("--baseline", help="fresh-phases: a directory holding an older harness_run package")
    args = parser.parse_args()
    if args.baseline and args.variant != "fresh-phases":
        parser.error("--baseline goes with --variant fresh-phases")
    run, rounds = VARIANTS[args.variant]
    args.rounds = 1 if args.smoke else args.rounds or rounds
    if args.smoke:
        args.opencode_rounds = 1
    run(args)


if __name__ == "__main__":
    main()
