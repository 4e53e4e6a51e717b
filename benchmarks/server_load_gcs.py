"""The team server's load target (issue 22 item 11): one `harness-run serve` on a gs:// store.

The store is fake-gcs-server behind a relay written here that adds 25 ms each way (50 ms a round
trip) to every store request, so a store call on the event loop would show. Against it:

1. idle subscribers: M SSE streams (``GET /v1/sessions/{id}/events?after=0:-1``) on a few sessions
   that have a stored turn, spread over keys and sessions under the stream caps; each replays the
   backlog once and then idles. Reported: the server's RSS growth per subscriber;
2. busy: N sessions each run ``--rounds`` real Claude Code turns (the scripted model) through the
   server at once, each turn streamed to its client, while the M streams stay open and a client asks
   ``/healthz`` every 100 ms. Reported: /healthz p50/p99/max during it, failed turns (a stream that
   did not end with a successful result), wall time;
3. turn ratio: then, with the M streams still open, single turns through the server and the same
   turn in this process (a local engine on the same store, through the same relay), alternating;
   reported as medians and their ratio (same run).

    python -m benchmarks server_load_gcs [--sessions 32] [--subscribers 200] [--rounds 2] [--smoke]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from benchmarks._common import PROMPT, claude_spec, model_secrets, percentile, scratch, scripted_model
from benchmarks._services import fake_gcs, proc_stats, start_server, stop_server

SECRET = "bench-server-secret-" + "s" * 32
PER_KEY = 25  # subscribers per key (each on its key's own session): under the default caps (32, 64)


class Relay:
    """A TCP relay on 127.0.0.1 to ``target`` that delivers every chunk ``delay`` seconds late (in
    order), each way: a store round trip costs ``2 * delay`` more. Runs in its own thread."""

    def __init__(self, target_port: int, delay: float) -> None:
        self.target_port = target_port
        self.delay = delay
        self.port = 0
        self._loop = asyncio.new_event_loop()
        started = threading.Event()
        threading.Thread(target=self._main, args=(started,), daemon=True).start()
        started.wait(10)

    def _main(self, started: threading.Event) -> None:
        async def serve() -> None:
            server = await asyncio.start_server(self._client, "127.0.0.1", 0)
            self.port = server.sockets[0].getsockname()[1]
            started.set()
            await server.serve_forever()

        self._loop.run_until_complete(serve())

    async def _client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.target_port)
        except OSError:
            writer.close()
            return
        await asyncio.gather(self._pipe(reader, up_writer), self._pipe(up_reader, writer))

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        queue: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue()

        async def deliver() -> None:
            while True:
                due, chunk = await queue.get()
                await asyncio.sleep(max(0.0, due - time.monotonic()))
                if not chunk:
                    with contextlib.suppress(OSError):
                        writer.write_eof()
                    return
                writer.write(chunk)
                with contextlib.suppress(OSError):
                    await writer.drain()

        sender = asyncio.ensure_future(deliver())
        try:
            while True:
                chunk = await reader.read(65536)
                await queue.put((time.monotonic() + self.delay, chunk))
                if not chunk:
                    break
            await sender
        except OSError:
            sender.cancel()
        finally:
            with contextlib.suppress(OSError):
                writer.close()


class Client:
    def __init__(self, url: str, model_url: str) -> None:
        import aiohttp

        self.url = url
        self.secrets = model_secrets(model_url)
        self.http = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=0), timeout=aiohttp.ClientTimeout(total=900)
        )

    async def new_session(self, key: str) -> str:
        headers = {"Authorization": f"Bearer {key}"}
        async with self.http.post(f"{self.url}/v1/engines/bench/sessions", json={}, headers=headers) as r:
            assert r.status == 201, await r.text()
            return (await r.json())["session_id"]

    async def turn(self, key: str, sid: str) -> bool:
        """One turn streamed over SSE; whether it ended with a successful result."""
        headers = {"Authorization": f"Bearer {key}", "Accept": "text/event-stream"}
        body = {"prompt": PROMPT, "secrets": self.secrets}
        async with self.http.post(f"{self.url}/v1/sessions/{sid}/turns", json=body, headers=headers) as r:
            if r.status != 200:
                print(f"turn refused: {r.status} {await r.text()}", file=sys.stderr)
                return False
            result = b""
            async for line in r.content:
                if line.startswith(b"data: ") and b'"type":"result"' in line:
                    result = line
                    break
        return bool(result) and b'"is_error":false' in result

    async def subscribe(self, key: str, sid: str) -> Any:
        headers = {"Authorization": f"Bearer {key}", "Accept": "text/event-stream"}
        r = await self.http.get(f"{self.url}/v1/sessions/{sid}/events?after=0:-1", headers=headers)
        assert r.status == 200, await r.text()
        return r

    async def healthz(self, samples: list[float], stop: asyncio.Event) -> None:
        while not stop.is_set():
            started = time.perf_counter()
            async with self.http.get(f"{self.url}/healthz") as r:
                await r.read()
                assert r.status == 200
            samples.append((time.perf_counter() - started) * 1000)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), 0.1)


async def drain(response: Any) -> None:
    with contextlib.suppress(Exception):
        async for _ in response.content:
            pass


async def bench(
    url: str, pid: int, store_url: str, model_url: str, keys: list[str], args: argparse.Namespace
) -> None:
    from harness_run.runtime.local import LocalEngine
    from harness_run.store import open_store

    client = Client(url, model_url)
    try:
        # each key owns its own idle session: subscribers k*PER_KEY.. go to key k's sessions
        owned: dict[str, list[str]] = {}
        for k in range(-(-args.subscribers // PER_KEY)):
            owned[keys[k]] = [await client.new_session(keys[k])]
        if not args.smoke:  # a stored turn for the subscribers to replay
            assert all(await asyncio.gather(*(client.turn(k, s[0]) for k, s in owned.items())))
        await asyncio.sleep(2)
        rss0 = proc_stats(pid)[1]
        order = list(owned.items())
        streams = await asyncio.gather(
            *(
                client.subscribe(order[i // PER_KEY][0], order[i // PER_KEY][1][0])
                for i in range(args.subscribers)
            )
        )
        readers = [asyncio.ensure_future(drain(r)) for r in streams]
        await asyncio.sleep(3)  # replayed, then idle
        rss1 = proc_stats(pid)[1]
        per = (rss1 - rss0) * 1024 / max(1, args.subscribers)
        print(
            f"idle subscribers: {args.subscribers}, server RSS {rss0:.1f} -> {rss1:.1f} MB, {per:.1f} KB each"
        )

        # busy: N sessions' turns at once, /healthz sampled throughout
        sessions = [
            (keys[i % len(keys)], await client.new_session(keys[i % len(keys)])) for i in range(args.sessions)
        ]
        samples: list[float] = []
        stop = asyncio.Event()
        sampler = asyncio.ensure_future(client.healthz(samples, stop))
        started = time.perf_counter()
        failed = 0
        for _ in range(args.rounds):
            done = await asyncio.gather(*(client.turn(k, s) for k, s in sessions), return_exceptions=True)
            failed += sum(1 for d in done if d is not True)
        wall = time.perf_counter() - started
        stop.set()
        await sampler
        turns = args.sessions * args.rounds
        print(
            f"busy: {turns} turns ({args.sessions} sessions x {args.rounds}) in {wall:.1f} s, failed turns {failed}"
        )
        print(
            f"/healthz during load: p50 {percentile(samples, 0.5):.1f} ms, p99 {percentile(samples, 0.99):.1f} ms, "
            f"max {max(samples):.1f} ms ({len(samples)} samples)"
        )

        # the same turn through the server and in this process, alternating
        engine = LocalEngine(claude_spec(), workdir=scratch("local-"), store=open_store(store_url))
        server_times: list[float] = []
        local_times: list[float] = []
        sid = await client.new_session(keys[0])
        session = engine.start_session()
        warm = 0 if args.smoke else 1  # a warm-up round (not in --smoke)
        for i in range(args.ratio_turns + warm):
            for where in ("server", "local") if i % 2 else ("local", "server"):
                t0 = time.perf_counter()
                if where == "server":
                    ok = await client.turn(keys[0], sid)
                else:
                    result = await session.run(PROMPT, secrets=client.secrets)
                    ok = not result.is_error
                assert ok, f"the {where} turn failed"
                if i >= warm:
                    (server_times if where == "server" else local_times).append(time.perf_counter() - t0)
        await engine.aclose()
        through, here = statistics.median(server_times), statistics.median(local_times)
        print(
            f"turn through the server: median {through * 1000:.0f} ms; in process: median {here * 1000:.0f} ms"
        )
        print(f"ratio server / in process: {through / here:.3f} ({len(server_times)} turns each)")
        for task in readers:
            task.cancel()
        for r in streams:
            r.close()
    finally:
        await client.http.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--sessions", type=int, default=32)
    parser.add_argument("--subscribers", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=2, help="turns per session under load")
    parser.add_argument("--ratio-turns", type=int, default=5, help="turns each way for the ratio")
    parser.add_argument("--delay", type=float, default=0.025, help="the relay's delay each way (s)")
    parser.add_argument("--server-log", type=Path, help="write the server's stderr to this file")
    parser.add_argument("--smoke", action="store_true", help="tiny numbers (2 sessions, 10 subscribers)")
    args = parser.parse_args()
    if args.smoke:
        args.sessions, args.subscribers, args.rounds, args.ratio_turns = 2, 10, 1, 1
    from harness_run.server import create_key, key_store
    from harness_run.store import open_store

    os.environ["HARNESS_RUN_SERVER_SECRET"] = SECRET
    os.environ.pop("ANTHROPIC_API_KEY", None)
    home = scratch("home-")
    with fake_gcs() as gcs:
        bucket = gcs.create_bucket("bench")
        relay = Relay(gcs.port, args.delay)
        os.environ["STORAGE_EMULATOR_HOST"] = f"http://127.0.0.1:{relay.port}"
        store_url = f"gs://{bucket}/hr"
        keys_store = key_store(open_store(store_url))
        keys = [
            create_key(keys_store, f"bench{k}", scopes=("turn",))[1]
            for k in range(max(1, -(-args.subscribers // PER_KEY)))
        ]
        spec_file = home / "agent.yaml"
        spec_file.write_text(claude_spec().to_yaml())
        with scripted_model() as model_url:
            env = {**os.environ, "HARNESS_RUN_HOME": str(home)}
            log = args.server_log.open("w") if args.server_log else subprocess.DEVNULL
            options = ("--agent-uids", "off", "--allow-private-endpoints")
            proc, url, _ = start_server(store_url, spec_file, *options, env=env, stderr=log)
            try:
                asyncio.run(bench(url, proc.pid, store_url, model_url, keys, args))
            finally:
                stop_server(proc)


if __name__ == "__main__":
    main()
