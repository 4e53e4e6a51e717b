"""Cost of redacting secrets in events, one labelled number per line.

    python -m benchmarks redaction [--runs N]

- redact_message_us / redact_tool_use_us: ``redact_event`` of a message (2 KB of text) and of a
  tool call with nested input, with 6 secret forms, when a secret occurs (median µs per event);
- redact_clean_us: the same message when no secret occurs (the common case);
- redact_text_short_us: ``redact_text`` of 2 KB with a short (whole-word) secret that occurs;
- json_text_message_us: the previous approach (replace in the JSON text, re-parse) on the message,
  for comparison (it broke on secrets that are JSON tokens);
- home_dirty_ms / home_clean_ms: ``redact_tree`` over a session home shaped like a Codex one (a
  rollout of 300 JSON lines, 60 other files of 4 MB in all, a WAL-mode SQLite thread index) at the
  end of a turn whose secret occurs in the rollout and the database, and again once it is clean (a
  turn that printed no secret).
"""

from __future__ import annotations

import argparse
import json
import shutil
import sqlite3
import statistics
import time
from pathlib import Path

from benchmarks._common import median_call, scratch
from harness_run.events import MessageEvent, ToolUseEvent
from harness_run.security import redact_event, redact_text, redact_tree, secret_forms


def _json_text(event: MessageEvent, forms: list[str]) -> MessageEvent:
    text = event.model_dump_json()
    if not any(f in text for f in forms):
        return event
    for form in forms:
        text = text.replace(form, "***")
    return MessageEvent.model_validate_json(text)


def _home(root: Path, secret: str) -> None:
    """A session home shaped like Codex's after a turn that printed ``secret``."""
    rollout = root / ".codex" / "sessions" / "2026" / "12" / "03" / "rollout-x.jsonl"
    rollout.parent.mkdir(parents=True)
    lines = [
        json.dumps({"type": "response_item", "n": i, "text": "ordinary output " * 40}) for i in range(300)
    ]
    lines[150] = json.dumps({"type": "function_call_output", "output": f"key={secret}"})
    rollout.write_text("\n".join(lines) + "\n")
    skills = root / ".codex" / "skills"
    skills.mkdir()
    for i in range(60):
        (skills / f"file{i}.md").write_bytes(bytes(range(256)) * 260)
    conn = sqlite3.connect(root / ".codex" / "thread_history_1.sqlite")
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("CREATE TABLE thread_items (item_id TEXT, item_json TEXT)")
    rows = [(str(i), json.dumps({"text": "x" * 500})) for i in range(200)] + [
        ("s", json.dumps({"out": secret}))
    ]
    conn.executemany("INSERT INTO thread_items VALUES (?, ?)", rows)
    conn.commit()
    conn.close()


def _home_ms(runs: int) -> tuple[float, float]:
    secret = "sk-canary-0123456789abcdef"
    forms = secret_forms([secret, "another-secret-value-42"])
    dirty: list[float] = []
    clean: list[float] = []
    for _ in range(max(1, runs // 200)):
        root = scratch("hr-bench-home-")
        try:
            _home(root, secret)
            t = time.perf_counter()
            assert redact_tree(root, forms) == []
            dirty.append((time.perf_counter() - t) * 1e3)
            t = time.perf_counter()
            redact_tree(root, forms)
            clean.append((time.perf_counter() - t) * 1e3)
        finally:
            shutil.rmtree(root)
    return statistics.median(dirty), statistics.median(clean)


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
    print(f"redact_message_us {median_call(lambda: redact_event(message, forms), runs, 1e6):.1f}")
    print(f"redact_tool_use_us {median_call(lambda: redact_event(tool, forms), runs, 1e6):.1f}")
    print(f"redact_clean_us {median_call(lambda: redact_event(clean, forms), runs, 1e6):.1f}")
    print(f"json_text_message_us {median_call(lambda: _json_text(message, forms), runs, 1e6):.1f}")
    short = body + " the value is false, " + body
    print(f"redact_text_short_us {median_call(lambda: redact_text(short, forms), runs, 1e6):.1f}")
    dirty, clean_ms = _home_ms(runs)
    print(f"home_dirty_ms {dirty:.1f}")
    print(f"home_clean_ms {clean_ms:.1f}")


if __name__ == "__main__":
    main()
