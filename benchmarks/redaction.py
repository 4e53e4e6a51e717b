"""Cost of redacting secrets in events, one labelled number per line.

    python benchmarks/redaction.py [--runs N]

- redact_message_us / redact_tool_use_us: ``redact_event`` of a message (2 KB of text) and of a
  tool call with nested input, with 6 secret forms, when a secret occurs (median µs per event);
- redact_clean_us: the same message when no secret occurs (the common case);
- redact_text_short_us: ``redact_text`` of 2 KB with a short (whole-word) secret that occurs;
- json_text_message_us: the previous approach (replace in the JSON text, re-parse) on the message,
  for comparison (it broke on secrets that are JSON tokens).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from harness_run.events import MessageEvent, ToolUseEvent  # noqa: E402
from harness_run.security import redact_event, redact_text, secret_forms  # noqa: E402


def _median_us(work: Callable[[], object], runs: int) -> float:
    samples: list[float] = []
    for _ in range(runs):
        t = time.perf_counter()
        work()
        samples.append((time.perf_counter() - t) * 1e6)
    return statistics.median(samples)


def _json_text(event: MessageEvent, forms: list[str]) -> MessageEvent:
    text = event.model_dump_json()
    if not any(f in text for f in forms):
        return event
    for form in forms:
        text = text.replace(form, "***")
    return MessageEvent.model_validate_json(text)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=2000)
    runs = parser.parse_args().runs
    forms = secret_forms(["sk-canary-0123456789abcdef", "false", "hunter22"])
    body = "the agent said something ordinary and long enough. " * 40
    message = MessageEvent(text=body + " sk-canary-0123456789abcdef " + body)
    clean = MessageEvent(text=body)
    tool = ToolUseEvent(
        tool_use_id="t1",
        name="Bash",
        input={"command": "echo sk-canary-0123456789abcdef", "opts": {"n": 1, "x": [body]}},
    )
    print(f"redact_message_us {_median_us(lambda: redact_event(message, forms), runs):.1f}")
    print(f"redact_tool_use_us {_median_us(lambda: redact_event(tool, forms), runs):.1f}")
    print(f"redact_clean_us {_median_us(lambda: redact_event(clean, forms), runs):.1f}")
    print(f"json_text_message_us {_median_us(lambda: _json_text(message, forms), runs):.1f}")
    short = body + " the value is false, " + body
    print(f"redact_text_short_us {_median_us(lambda: redact_text(short, forms), runs):.1f}")


if __name__ == "__main__":
    main()
