"""Where in a Claude Code turn harness-run's time goes, phase by phase, against the bare CLI.

A relay in its own process sits between the CLI and the scripted model and stamps each model
request's arrival and the end of its answer (``time.monotonic``, one clock for every process). A turn
of the scripted rules (a shell tool call, then the answer) has two model requests, which cut it
into three phases:

  start   the turn's start -> the first model request   (process start-up, the CLI's own start)
  tool    the first answer's end -> the second request   (the tool call: permission, hook, command)
  tail    the last answer's end -> the turn's end        (result, the CLI's exit, the end of the turn)

Variants, alternating round by round (after one warm-up round), medians: ``bare`` is ``claude -p``
as a user types it, timed by the caller around the process; the others are ``await session.run()``
on a local engine, ``turn_overhead.py --two-turn``'s variants — with the security defaults, without
the credential guards, and without the guards and the model proxy (``HARNESS_RUN_MODEL_PROXY=0``).

    python benchmarks/turn_phases.py [--rounds N] [--smoke]
"""

from __future__ import annotations

import argparse
import asyncio
import http.client
import http.server
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import (
    KEY,
    SECURITY_VARIANTS,
    bare_cli_turn,
    scripted_model,
    security_variant,
    security_variant_engines,
)

PROMPT = "write out.txt"
VARIANTS = ("bare", *SECURITY_VARIANTS)
_HOP = ("host", "content-length", "connection", "transfer-encoding")


def _serve_relay(upstream: int) -> None:
    """The relay process: forwards each request to ``upstream``, prints ``start T`` / ``end T``."""

    class Relay(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_POST(self) -> None:
            print(f"start {time.monotonic()}", flush=True)
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            conn = http.client.HTTPConnection("127.0.0.1", upstream, timeout=60)
            headers = {k: v for k, v in self.headers.items() if k.lower() not in _HOP}
            conn.request("POST", self.path, body=body, headers=headers)
            answer = conn.getresponse()
            data = answer.read()
            self.send_response(answer.status)
            for key, value in answer.getheaders():
                if key.lower() not in _HOP:
                    self.send_header(key, value)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
            self.wfile.flush()
            print(f"end {time.monotonic()}", flush=True)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Relay)
    print(f"port {server.server_address[1]}", flush=True)
    server.serve_forever()


@contextmanager
def _relay(model_url: str) -> Iterator[tuple[str, list[tuple[str, float]]]]:
    """The relay's URL and the marks it prints (appended as they come)."""
    upstream = model_url.rsplit(":", 1)[1]
    proc = subprocess.Popen(
        [sys.executable, __file__, "--relay", upstream], stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout is not None
    first = proc.stdout.readline().split()
    if first[:1] != ["port"]:
        proc.kill()
        raise SystemExit(f"the relay did not start: {first}")
    marks: list[tuple[str, float]] = []

    def read() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            kind, at = line.split()
            marks.append((kind, float(at)))

    threading.Thread(target=read, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{first[1]}", marks
    finally:
        proc.kill()
        proc.wait()


def _phases(marks: list[tuple[str, float]], t0: float, t1: float) -> tuple[float, float, float, float]:
    def within(kind: str) -> list[float]:
        return [t for k, t in list(marks) if k == kind and t0 <= t <= t1]

    deadline = time.monotonic() + 2
    while len(within("end")) < len(within("start")) and time.monotonic() < deadline:
        time.sleep(0.01)  # the reader thread may lag the turn's end by a line
    starts, ends = within("start"), within("end")
    if len(starts) < 2 or not ends:
        raise SystemExit(f"expected two model requests in the turn, saw {len(starts)}")
    return starts[0] - t0, starts[-1] - ends[0], t1 - ends[-1], t1 - t0


async def measure(
    url: str, marks: list[tuple[str, float]], rounds: int
) -> dict[str, list[tuple[float, ...]]]:
    secrets = {"ANTHROPIC_BASE_URL": url, "ANTHROPIC_API_KEY": KEY}
    engines = security_variant_engines()
    rows: dict[str, list[tuple[float, ...]]] = {name: [] for name in VARIANTS}
    for i in range(rounds + 1):
        for name in VARIANTS if i % 2 else tuple(reversed(VARIANTS)):
            t0 = time.monotonic()
            if name == "bare":
                await asyncio.to_thread(bare_cli_turn, url, PROMPT)
            else:
                with security_variant(name):
                    result = await engines[name].start_session().run(PROMPT, secrets=secrets)
                assert not result.is_error, result.error
            t1 = time.monotonic()
            if i:  # the first round warms up
                rows[name].append(_phases(marks, t0, t1))
    for engine in {id(e): e for e in engines.values()}.values():
        engine.close()
    return rows


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--smoke", action="store_true", help="one round (CI smoke test)")
    parser.add_argument("--relay", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.relay:
        _serve_relay(int(args.relay))
        return
    rounds = 1 if args.smoke else args.rounds
    with scripted_model() as model_url, _relay(model_url) as (url, marks):
        rows = asyncio.run(measure(url, marks, rounds))
    print(f"rounds: {rounds} (after one warm-up), alternating; medians in ms")
    base = [statistics.median(col) for col in zip(*rows["bare"], strict=True)]
    for name in VARIANTS:
        med = [statistics.median(col) for col in zip(*rows[name], strict=True)]
        cells = "  ".join(
            f"{label} {m * 1000:.0f} ({(m - b) * 1000:+.0f})"
            for label, m, b in zip(("start", "tool", "tail", "total"), med, base, strict=True)
        )
        print(f"phases [{name}]: {cells}")


if __name__ == "__main__":
    main()
