"""Token streaming: what deltas cost, one labelled number per line.

    python -m benchmarks deltas [--turns N] [--runs N] [--smoke]

- delta_redact_us: ``EventRedactor.redact`` of one 48-character delta (6 secret forms, none
  occurring: the common case), median µs;
- turn_partial_s / turn_whole_s: a scripted Claude Code turn answering 4 KB of text, with
  ``--include-partial-messages`` (as harness-run runs it) and without, median s (alternating);
- deltas_per_turn: the delta events of that turn (the scripted model streams 48-character chunks).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from typing import Any

from benchmarks._common import local_engine, median_call, model_secrets
from harness_run.events import DeltaEvent
from harness_run.harness import claude_code
from harness_run.security import EventRedactor, secret_forms
from harness_run.testing import ScriptedModel, text

ANSWER = ("lorem ipsum dolor sit amet, consectetur adipiscing elit " * 80)[:4000]
_LAUNCH = claude_code.ClaudeCodeDriver.launch


def _without_partial(self: Any, ctx: Any) -> Any:
    plan = _LAUNCH(self, ctx)
    plan.argv.remove("--include-partial-messages")
    return plan


def redact_us(runs: int) -> float:
    redactor = EventRedactor(secret_forms(["sk-canary-0123456789abcdef", "hunter22", "false"]))
    delta = DeltaEvent(text="lorem ipsum dolor sit amet, consectetur adipisc.", message_id="m")
    return median_call(lambda: redactor.redact(delta), runs, 1e6)


async def turns(count: int) -> tuple[float, float, float]:
    partial: list[float] = []
    whole: list[float] = []
    deltas = 0
    with ScriptedModel() as model:
        engine = local_engine()
        secrets = model_secrets(model.url)
        for index in range(count * 2):
            streamed = index % 2 == 0
            claude_code.ClaudeCodeDriver.launch = _LAUNCH if streamed else _without_partial  # type: ignore[method-assign]
            model.add(text(ANSWER))
            session = engine.start_session()
            started = time.perf_counter()
            run = session.run("write", secrets=secrets)
            seen = [event async for event in run]
            await run
            (partial if streamed else whole).append(time.perf_counter() - started)
            deltas += sum(1 for e in seen if e.type == "delta") if streamed else 0
        await engine.aclose()
    claude_code.ClaudeCodeDriver.launch = _LAUNCH  # type: ignore[method-assign]
    return statistics.median(partial), statistics.median(whole), deltas / count


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--turns", type=int, default=7)
    parser.add_argument("--runs", type=int, default=5000)
    parser.add_argument("--smoke", action="store_true", help="one turn each, few redaction runs")
    args = parser.parse_args()
    count, runs = (1, 50) if args.smoke else (args.turns, args.runs)
    print(f"delta_redact_us {redact_us(runs):.1f}")
    with_partial, without, per_turn = asyncio.run(turns(count))
    print(f"turn_partial_s {with_partial:.3f}")
    print(f"turn_whole_s {without:.3f}")
    print(f"deltas_per_turn {per_turn:.0f}")


if __name__ == "__main__":
    main()
