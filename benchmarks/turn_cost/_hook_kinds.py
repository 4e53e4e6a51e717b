"""``--variant hook-kinds``: what a ``PreToolUse`` hook costs a Claude Code turn, by kind: the bare
CLI's scripted turn (one tool call) with a settings file holding no hook, an HTTP hook (what
harness-run writes when the model proxy serves: here a stdlib server answering ``{}``, so only Claude
Code's own machinery is measured), the same HTTP hook behind a matcher that names another tool
(``NotebookEdit``: does having a hook cost, or running it?), a command hook that runs ``true`` (the
floor of any command hook: Claude Code spawning a shell), and the command hook harness-run writes
otherwise (the fail-closed wrapper around the small client asking a live ``GuardBroker``).

Medians of wall time and of the CPU time of the CLI and its children (less distorted by a loaded
machine), each as a ratio to the turn without a hook.
"""

from __future__ import annotations

import argparse
import asyncio
import http.server
import json
import statistics
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from benchmarks._cli import bare_cli_timed
from benchmarks._common import PROMPT, alternating, scratch, scripted_model


class _Allow(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"{}")

    def log_message(self, format: str, *args: Any) -> None:
        pass


@contextmanager
def _allow_server() -> Iterator[int]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Allow)
    threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True).start()
    try:
        yield int(server.server_address[1])
    finally:
        server.shutdown()
        server.server_close()


@contextmanager
def _guard_client_command() -> Iterator[str]:
    """harness-run's command hook against a live guard server (on its own loop in a thread)."""
    from harness_run import SecurityPolicy
    from harness_run.harness._policy import guard_command
    from harness_run.security import GuardBroker

    loop = asyncio.new_event_loop()
    threading.Thread(target=loop.run_forever, daemon=True).start()
    broker = GuardBroker()
    env = broker.substitute(SecurityPolicy(), {})
    asyncio.run_coroutine_threadsafe(broker.start(), loop).result(10)
    try:
        command = guard_command(SecurityPolicy(), env=env)
        assert command is not None
        yield command
    finally:
        asyncio.run_coroutine_threadsafe(broker.aclose(), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)


def _hook(entry: dict[str, Any], matcher: str = "*") -> dict[str, Any]:
    return {"hooks": {"PreToolUse": [{"matcher": matcher, "hooks": [entry]}]}}


def _turn(url: str, settings: dict[str, Any]) -> tuple[float, float]:
    """One bare ``claude -p`` turn with ``settings``: (wall seconds, CPU seconds of the CLI and its children)."""
    home, cwd = scratch("home-"), scratch("ws-")
    settings_file = home / "settings.json"
    settings_file.write_text(json.dumps(settings))
    timed = bare_cli_timed(url, PROMPT, "--settings", str(settings_file), home=home, cwd=cwd)
    if not (cwd / "out.txt").exists():
        raise SystemExit("the tool call did not run (did a hook deny it?)")
    return timed


def run(args: argparse.Namespace) -> None:
    with scripted_model() as url, _allow_server() as port, _guard_client_command() as client:
        http = {"type": "http", "url": f"http://127.0.0.1:{port}/", "timeout": 10, "onFailure": "block"}
        variants: dict[str, dict[str, Any]] = {
            "none": {},
            "http": _hook(http),
            "http_other_tool": _hook(http, matcher="NotebookEdit"),
            "command_true": _hook({"type": "command", "command": "true", "timeout": 30}),
            "command_client": _hook({"type": "command", "command": client, "timeout": 30}),
        }
        wall: dict[str, list[float]] = {name: [] for name in variants}
        cpu: dict[str, list[float]] = {name: [] for name in variants}
        for name, measured in alternating(list(variants), args.rounds):
            w, c = _turn(url, variants[name])
            if measured:
                wall[name].append(w)
                cpu[name].append(c)
    base_wall, base_cpu = statistics.median(wall["none"]), statistics.median(cpu["none"])
    print(f"rounds: {args.rounds} (after one warm-up), alternating")
    for name in variants:
        w, c = statistics.median(wall[name]), statistics.median(cpu[name])
        print(
            f"hook_{name}_ms {w * 1000:.0f}  (min {min(wall[name]) * 1000:.0f})  cpu {c * 1000:.0f}"
            f"  ratio {w / base_wall:.3f}  cpu ratio {c / base_cpu:.3f}"
        )
