"""Human-in-the-loop approvals: what a tool call that waits for a person costs, beyond the person.

The same scripted Claude Code turn (one shell call, ``echo $EPOCHREALTIME``: the command prints the
moment it runs, then text) in three variants, alternating, after a warm-up round, in process
(``local``) and through a ``harness-run serve`` subprocess (``server``: the client decides with
``POST /v1/sessions/{id}/approvals/{request_id}``); every run sends only the model key:

- ``none``: no approval policy;
- ``unmatched``: ``approvals.commands=["git push*"]``: a policy that matches nothing (a turn without
  approvals must cost nothing extra);
- ``approve``: ``approvals.commands=["echo *"]``: the call waits; the client approves it the moment
  the ``approval_request`` event arrives.

Reported, medians in ms: the whole turn; "tool call -> tool running" (the ``tool_use`` event reached
the client -> the command's own clock: the guard's hook, any wait, the CLI starting the tool);
the round trip of a waiting call over the guard's own cost = that span's ``approve`` median minus
its ``none`` median; and from the request (the guard stored it: ``expires_at - timeout_s``) to the
client holding the event and to the decision stored (``approve()`` returned). Targets: a round trip
of ≤ 50 ms in process, ≤ 150 ms through the server; ``unmatched - none`` about 0.

    python -m benchmarks approvals [--rounds N] [--no-server]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import time
from typing import Any

from benchmarks._common import KEY, alternating, claude_spec, local_engine, median, scratch, scripted_model
from benchmarks._services import make_key, start_server, stop_server

PROMPT = "note the time"
TIMEOUT_S = 60.0
VARIANTS: dict[str, dict[str, Any] | None] = {
    "none": None,
    "unmatched": {"commands": ["git push*"], "timeout_s": TIMEOUT_S},
    "approve": {"commands": ["echo *"], "timeout_s": TIMEOUT_S},
}


SCRIPT = """\
- rules:
    - tool_result: false
      reply: {shell: "echo $EPOCHREALTIME"}
    - tool_result: true
      reply: {text: "done"}
"""
"""The scripted model's rules: the command prints the moment it runs (bash's clock, no process)."""


async def _turn(engine: Any, approvals: dict[str, Any] | None) -> dict[str, float]:
    """One turn of a new session; its timings in seconds: ``turn`` (the whole turn), ``call`` (the
    harness printed the tool call -> the command runs: the guard, the wait, the CLI's tool start),
    and for a waiting call ``event`` and ``decided`` (from the guard storing the request)."""
    session = engine.start_session()
    config = {"approvals": approvals} if approvals is not None else None
    start = time.perf_counter()
    run = session.run(PROMPT, secrets={"ANTHROPIC_API_KEY": KEY}, config=config)
    times: dict[str, float] = {}
    called = 0.0
    async for event in run:
        if event.type == "tool_use":
            called = time.time()
        if event.type == "approval_request":
            requested = event.expires_at - TIMEOUT_S
            times["event"] = time.time() - requested
            await run.approve(event.request_id)
            times["decided"] = time.time() - requested
    result = await run
    times["turn"] = time.perf_counter() - start
    if result.is_error:
        raise SystemExit(f"the turn failed: {result.error}")
    said = [getattr(e, "content", "") for e in run.events if e.type == "tool_result"]
    if len(said) != 1 or not re.fullmatch(r"\d+\.\d+", said[0].strip()):
        raise SystemExit(f"the tool did not run once: {said}")
    times["call"] = float(said[0]) - called
    return times


async def _series(engine: Any, rounds: int) -> dict[str, list[dict[str, float]]]:
    found: dict[str, list[dict[str, float]]] = {name: [] for name in VARIANTS}
    for name, measured in alternating(list(VARIANTS), rounds):
        times = await _turn(engine, VARIANTS[name])
        if measured:
            found[name].append(times)
    return found


def _ms(runs: list[dict[str, float]], label: str) -> float:
    return median([t[label] for t in runs]) * 1000


def _print(where: str, found: dict[str, list[dict[str, float]]], target_ms: float) -> None:
    n = len(found["none"])
    turn = {name: _ms(runs, "turn") for name, runs in found.items()}
    call = {name: _ms(runs, "call") for name, runs in found.items()}
    print(f"{where} turn (n={n}): " + ", ".join(f"{k} {v:.0f} ms" for k, v in turn.items()))
    print(f"{where} tool call -> tool running: " + ", ".join(f"{k} {v:.1f} ms" for k, v in call.items()))
    print(f"{where} unmatched - none: {call['unmatched'] - call['none']:+.1f} ms")
    for label in ("event", "decided"):
        print(f"{where} request -> {label}: {_ms(found['approve'], label):.1f} ms")
    added = call["approve"] - call["none"]
    verdict = "met" if added <= target_ms else "NOT met"
    print(
        f"{where} approval round trip (approve - none): {added:+.1f} ms: target {target_ms:g} ms {verdict}; "
        f"whole turn {turn['approve'] - turn['none']:+.1f} ms"
    )


async def _local(model_url: str, rounds: int) -> dict[str, list[dict[str, float]]]:
    engine = local_engine(claude_spec("bench-approvals", model_base_url=model_url), "approvals-local-")
    try:
        return await _series(engine, rounds)
    finally:
        await engine.aclose()


async def _served(url: str, key: str, rounds: int) -> dict[str, list[dict[str, float]]]:
    import harness_run

    engine = harness_run.connect(url, api_key=key)
    try:
        return await _series(engine, rounds)
    finally:
        await engine.aclose()


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--no-server", action="store_true", help="only the in-process series")
    args = parser.parse_args()
    os.environ.pop("ANTHROPIC_API_KEY", None)
    with scripted_model(SCRIPT) as model_url:
        _print("local", asyncio.run(_local(model_url, args.rounds)), 50)
        if args.no_server:
            return
        store = scratch("approvals-server-")
        spec_file = store / "agent.yaml"
        spec_file.write_text(claude_spec("bench-approvals", model_base_url=model_url).to_yaml())
        key = make_key(store)
        proc, url, _ = start_server(store, spec_file)
        try:
            _print("server", asyncio.run(_served(url, key, args.rounds)), 150)
        finally:
            stop_server(proc)


if __name__ == "__main__":
    main()
