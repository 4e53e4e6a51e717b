"""The team server under load: one `harness-run serve` process, scripted Claude Code turns.

1. event delay: for turns started through the server's SSE prompt path, the time from the server
   emitting an event (its ``ts``, set when the harness's line was turned into an event) to the
   client reading it from the stream — the harness's first event and every event (p50/p95);
2. fan-out: S concurrent SSE subscribers on one session (``GET /v1/sessions/{id}/events``) while a
   turn runs; each must see every event of the turn once, in order (the ids are checked against the
   stored log);
3. many sessions: C concurrent sessions, each a turn streamed over its own SSE prompt request;
   every stream must be complete (ids ``<turn>:0..n`` in order, ending with a successful result).

Reported: failures, lost/duplicated events, wall time, and the server's peak RSS and CPU seconds
(from /proc of the server process). ``--smoke`` runs tiny numbers (tests/test_benchmarks.py).

    python -m benchmarks server_load [--subscribers 200] [--sessions 64] [--turns 10] [--smoke]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import time
from typing import Any

from benchmarks._common import claude_spec, model_secrets, percentile, scratch, scripted_model
from benchmarks._services import make_key, proc_stats, start_server, stop_server


async def read_sse(response: Any, until_result: bool = True) -> list[tuple[str, dict[str, Any], float]]:
    """(id, event, time read) of each stored event of an aiohttp SSE response, up to the first
    result (``delta`` events, live only and without an id, are left out)."""
    out: list[tuple[str, dict[str, Any], float]] = []
    buffer = b""
    event_id = ""
    async for chunk in response.content.iter_any():
        now = time.time()
        buffer += chunk
        *lines, buffer = buffer.split(b"\n")
        for raw in lines:
            line = raw.decode()
            if line.startswith("id: "):
                event_id = line[4:]
            elif line.startswith("data: "):
                event = json.loads(line[6:])
                if event["type"] == "delta":  # live only: no SSE id, not stored, not counted
                    continue
                out.append((event_id, event, now))
                if until_result and event["type"] == "result":
                    return out
    return out


class Client:
    def __init__(self, url: str, key: str, model_url: str) -> None:
        import aiohttp

        self.url = url
        self.headers = {"Authorization": f"Bearer {key}", "Content-Type": "application/json"}
        self.secrets = model_secrets(model_url)
        self.http = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=0), timeout=aiohttp.ClientTimeout(total=600)
        )

    async def new_session(self) -> str:
        async with self.http.post(
            f"{self.url}/v1/engines/bench/sessions", json={}, headers=self.headers
        ) as r:
            assert r.status == 201, await r.text()
            return (await r.json())["session_id"]

    async def turn_sse(self, sid: str, prompt: str) -> list[tuple[str, dict[str, Any], float]]:
        headers = {**self.headers, "Accept": "text/event-stream"}
        body = {"prompt": prompt, "secrets": self.secrets}
        async with self.http.post(f"{self.url}/v1/sessions/{sid}/turns", json=body, headers=headers) as r:
            assert r.status == 200, await r.text()
            return await read_sse(r)

    async def start_turn(self, sid: str, prompt: str) -> int:
        body = {"prompt": prompt, "secrets": self.secrets}
        async with self.http.post(
            f"{self.url}/v1/sessions/{sid}/turns", json=body, headers=self.headers
        ) as r:
            assert r.status == 200, await r.text()
            return int((await r.json())["turn"])

    async def stored_ids(self, sid: str, turn: int) -> list[str]:
        async with self.http.get(
            f"{self.url}/v1/sessions/{sid}/events?format=json", headers=self.headers
        ) as r:
            events = (await r.json())["events"]
        return [f"{e['turn']}:{e['seq']}" for e in events if e["turn"] == turn]

    async def close(self) -> None:
        await self.http.close()


def check_stream(ids: list[str], expected: list[str]) -> tuple[int, int]:
    """(lost, duplicated) events of a stream against the expected ids."""
    return len(set(expected) - set(ids)), len(ids) - len(set(ids))


async def event_delay(client: Client, turns: int) -> tuple[list[float], list[float]]:
    first: list[float] = []
    every: list[float] = []
    sid = await client.new_session()
    for i in range(turns + 1):
        events = await client.turn_sse(sid, f"turn {i}")
        assert events[-1][1]["type"] == "result"
        assert not events[-1][1]["result"]["is_error"]
        harness = [(e, t) for _, e, t in events if e["type"] not in ("user", "setup")]
        if i:  # the first turn warms up
            first.append((harness[0][1] - harness[0][0]["ts"]) * 1000)
            every.extend((t - e["ts"]) * 1000 for e, t in harness)
    return first, every


async def fan_out(client: Client, subscribers: int) -> dict[str, Any]:
    sid = await client.new_session()
    headers = {**client.headers, "Accept": "text/event-stream"}
    url = f"{client.url}/v1/sessions/{sid}/events?after=0:-1"
    responses = await asyncio.gather(
        *(client.http.get(url, headers=headers) for _ in range(subscribers)), return_exceptions=True
    )
    opened = [r for r in responses if not isinstance(r, BaseException) and r.status == 200]
    failures = subscribers - len(opened)
    started = time.perf_counter()
    turn = await client.start_turn(sid, "fan out")
    streams = await asyncio.gather(*(read_sse(r) for r in opened), return_exceptions=True)
    wall = time.perf_counter() - started
    for r in opened:
        r.release()
    expected = await client.stored_ids(sid, turn)
    lost = duplicated = 0
    for stream in streams:
        if isinstance(stream, BaseException) or not stream or stream[-1][1]["type"] != "result":
            failures += 1
            continue
        ids = [i for i, _, _ in stream]
        a, b = check_stream(ids, expected)
        lost, duplicated = lost + a, duplicated + b
        failures += ids != expected
    return {
        "failures": failures,
        "lost": lost,
        "duplicated": duplicated,
        "wall": wall,
        "events": len(expected),
    }


async def many_sessions(client: Client, sessions: int) -> dict[str, Any]:
    sids = await asyncio.gather(*(client.new_session() for _ in range(sessions)))
    started = time.perf_counter()
    streams = await asyncio.gather(*(client.turn_sse(sid, "work") for sid in sids), return_exceptions=True)
    wall = time.perf_counter() - started
    failures = lost = duplicated = 0
    for sid, stream in zip(sids, streams, strict=True):
        if isinstance(stream, BaseException) or stream[-1][1]["result"]["is_error"]:
            failures += 1
            continue
        ids = [i for i, _, _ in stream]
        expected = await client.stored_ids(sid, 1)
        a, b = check_stream(ids, expected)
        lost, duplicated = lost + a, duplicated + b
        failures += ids != expected or ids != [f"1:{n}" for n in range(len(ids))]
    return {"failures": failures, "lost": lost, "duplicated": duplicated, "wall": wall}


async def bench(url: str, key: str, model_url: str, pid: int, args: argparse.Namespace) -> None:
    client = Client(url, key, model_url)
    try:
        first, every = await event_delay(client, args.turns)
        print(
            f"harness's first event -> client, through SSE: p50 {percentile(first, 0.5):.1f} ms, "
            f"p95 {percentile(first, 0.95):.1f} ms ({len(first)} turns)"
        )
        print(
            f"every harness event -> client: p50 {percentile(every, 0.5):.1f} ms, "
            f"p95 {percentile(every, 0.95):.1f} ms ({len(every)} events)"
        )
        for label, run, size in (
            ("SSE subscribers on one session", fan_out, args.subscribers),
            ("concurrent sessions", many_sessions, args.sessions),
        ):
            cpu0, _, _ = proc_stats(pid)
            found = await run(client, size)
            cpu1, rss, peak = proc_stats(pid)
            print(
                f"{size} {label}: wall {found['wall']:.2f} s, failures {found['failures']}, "
                f"lost {found['lost']}, duplicated {found['duplicated']}, server CPU {cpu1 - cpu0:.2f} s, "
                f"server RSS {rss:.1f} MB (peak {peak:.1f} MB)"
            )
    finally:
        await client.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--subscribers", type=int, default=200)
    parser.add_argument("--sessions", type=int, default=64)
    parser.add_argument("--turns", type=int, default=10, help="turns for the event-delay figures")
    parser.add_argument(
        "--smoke", action="store_true", help="tiny numbers (5 subscribers, 2 sessions, 1 turn)"
    )
    args = parser.parse_args()
    if args.smoke:
        args.subscribers, args.sessions, args.turns = 5, 2, 1
    store = scratch("server-load-")
    spec_file = store / "agent.yaml"
    spec_file.write_text(claude_spec().to_yaml())
    key = make_key(store)
    os.environ.pop("ANTHROPIC_API_KEY", None)
    with scripted_model() as model_url:
        proc, url, _ = start_server(store, spec_file)
        try:
            asyncio.run(bench(url, key, model_url, proc.pid, args))
        finally:
            stop_server(proc)


if __name__ == "__main__":
    main()
