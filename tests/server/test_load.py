"""The server under hostile or heavy load (issue 22 item 7), on a real server over real HTTP.

- a client that never finishes its request head (slowloris) is disconnected at the head timeout,
  while ``/healthz`` stays fast; connections beyond the cap are closed at once;
- 100 idle SSE subscribers on a session with a long log read it once each, then leave the store
  alone (counted by a wrapper around the real SQLite store) and use little CPU;
- a stream over the per-key or per-session cap gets 429 naming the cap;
- requests with unknown key ids make no store read; repeated 401s from one client get 429.
"""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import time
import urllib.error
import urllib.request
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import Any, cast

import aiohttp
from aiohttp import web

from harness_run import AgentSpec
from harness_run.events import MessageEvent, UserEvent
from harness_run.server import CachedKeys, ServerState, create_key, key_store, make_app
from harness_run.server._limits import (
    AUTH_FAILURES,
    STREAM_LIMITS,
    AuthFailures,
    GuardedRunner,
    StreamLimits,
)
from harness_run.store import ApiKeyRecord, HistoryStore, SqliteStore

from ._helpers import MODEL

SECRET = b"test-load-secret-" + b"x" * 32
SPEC = AgentSpec(name="srv", harness="claude-code", model=MODEL)


class CountingStore:
    """A real store whose method calls are counted (instrumentation, not a double)."""

    def __init__(self, inner: SqliteStore) -> None:
        self.inner = inner
        self.calls: Counter[str] = Counter()
        self.on_loop: Counter[str] = Counter()
        """Calls made on the thread of a running event loop (a blocked loop: what must not happen)."""
        self._lock = threading.Lock()

    def __getattr__(self, name: str) -> Any:
        found = getattr(self.inner, name)
        if not callable(found):
            return found

        def counted(*args: Any, **kwargs: Any) -> Any:
            try:
                asyncio.get_running_loop()
                looped = True
            except RuntimeError:
                looped = False
            with self._lock:
                self.calls[name] += 1
                if looped:
                    self.on_loop[name] += 1
            return found(*args, **kwargs)

        return counted

    # the key methods by name: isinstance(store, KeyStore) looks for them statically
    def put_api_key(self, record: ApiKeyRecord) -> None:
        self.__getattr__("put_api_key")(record)

    def get_api_key(self, key_id: str) -> ApiKeyRecord | None:
        return self.__getattr__("get_api_key")(key_id)

    def list_api_keys(self) -> list[ApiKeyRecord]:
        return self.__getattr__("list_api_keys")()


class LoadServer:
    """A real server (the app ``serve`` runs, under :class:`GuardedRunner`) in a thread, its store
    wrapped in a :class:`CountingStore`; ``tune(app)`` sets limits before it starts."""

    def __init__(self, root: Path, tune: Callable[[web.Application], None] = lambda app: None, **runner: Any):
        self.root = root
        self.tune = tune
        self.runner_args = runner
        self.store = CountingStore(SqliteStore(root))
        keys = key_store(cast(HistoryStore, self.store))
        self.key = create_key(keys, "owner", scopes=("turn",), secret=SECRET)[1]
        self.admin = create_key(keys, "admin", scopes=("admin",), secret=SECRET)[1]
        self.keys = CachedKeys(keys, 5.0)
        self.url = ""
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._stop = asyncio.Event()
        self._thread = threading.Thread(
            target=lambda: self._loop.run_until_complete(self._serve()), daemon=True
        )

    def __enter__(self) -> LoadServer:
        self._thread.start()
        assert self._ready.wait(30), "the server did not start"
        return self

    def __exit__(self, *exc: object | TracebackType) -> None:
        self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(30)
        self.store.inner.close()

    async def _serve(self) -> None:
        state = ServerState(cast(HistoryStore, self.store), self.root, [SPEC])
        app = make_app(state, self.keys, secret=SECRET)
        self.tune(app)
        runner = GuardedRunner(app, access_log=None, shutdown_timeout=1.0, **self.runner_args)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        self.url = f"http://127.0.0.1:{runner.addresses[0][1]}"
        self._ready.set()
        await self._stop.wait()
        await state.close()
        await runner.cleanup()

    def call(self, path: str, key: str | None = None, body: Any = None) -> tuple[int, Any]:
        data = json.dumps(body).encode() if body is not None else None
        headers = {"Content-Type": "application/json", **({"Authorization": f"Bearer {key}"} if key else {})}
        request = urllib.request.Request(self.url + path, data=data, headers=headers)
        try:
            with urllib.request.urlopen(request, timeout=30) as answer:
                raw = answer.read()
                return answer.status, json.loads(raw) if raw else None
        except urllib.error.HTTPError as exc:
            return exc.code, json.loads(exc.read())

    def new_session(self) -> str:
        status, body = self.call("/v1/engines/srv/sessions", self.key, {})
        assert status == 201, body
        return body["session_id"]


def _healthz_ms(url: str) -> float:
    started = time.perf_counter()
    with urllib.request.urlopen(url + "/healthz", timeout=10) as answer:
        assert answer.status == 200
    return (time.perf_counter() - started) * 1000


def _closed(sock: socket.socket, within: float) -> float | None:
    """Seconds until the server closed ``sock`` (reading only), or None if it stayed open."""
    sock.settimeout(0.2)
    started = time.monotonic()
    while time.monotonic() - started < within:
        try:
            if sock.recv(1024) == b"":
                return time.monotonic() - started
        except TimeoutError:
            continue
        except ConnectionError:
            return time.monotonic() - started
    return None


def test_a_half_sent_request_head_is_cut_off_and_connections_are_capped(tmp_path: Path) -> None:
    with LoadServer(tmp_path, head_timeout=1.5, max_connections=12) as server:
        port = int(server.url.rsplit(":", 1)[1])
        slow = socket.create_connection(("127.0.0.1", port))
        slow.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")
        started = time.monotonic()
        latencies: list[float] = []
        dropped = False
        while time.monotonic() - started < 4:  # a header byte now and then, never the end of the head
            try:
                slow.sendall(b"X")
            except OSError:
                dropped = True
                break
            latencies.append(_healthz_ms(server.url))
            time.sleep(0.2)
        lasted = time.monotonic() - started
        assert dropped or _closed(slow, 1) is not None, "the half-sent request was never cut off"
        assert lasted < 3.0, f"cut off after {lasted:.1f} s; the head timeout is 1.5 s"
        assert max(latencies) < 500, latencies  # the server stayed responsive meanwhile
        slow.close()

        idle = [socket.create_connection(("127.0.0.1", port)) for _ in range(12)]
        time.sleep(0.2)
        over = socket.create_connection(("127.0.0.1", port))
        over.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        assert (_closed(over, 1.0) or 9) < 1.0, "a connection over the cap was served"
        for sock in idle:  # the idle ones are cut off at the head timeout; then the server serves again
            assert _closed(sock, 3.0) is not None
            sock.close()
        time.sleep(0.2)
        assert _healthz_ms(server.url) < 1000


async def _read_until(response: aiohttp.ClientResponse, last_id: str) -> int:
    """Read SSE events until the one with ``last_id``; how many were read."""
    count = 0
    async for line in response.content:
        if line.startswith(b"id: "):
            count += 1
            if line.decode().strip() == f"id: {last_id}":
                return count
    raise AssertionError(f"the stream ended before {last_id}")


def test_idle_subscribers_read_a_long_log_once_and_then_leave_the_store_alone(tmp_path: Path) -> None:
    def tune(app: web.Application) -> None:
        app[STREAM_LIMITS] = StreamLimits(per_key=200, per_session=200)

    with LoadServer(tmp_path, tune) as server:
        sid = server.new_session()
        store = server.store.inner
        turns, per_turn = 20, 25  # a long log: 500 stored events
        for turn in range(1, turns + 1):
            events = [UserEvent(text=f"prompt {turn}")]
            events += [MessageEvent(text=f"answer {turn}.{n} " + "x" * 60) for n in range(per_turn - 1)]
            store.append_events(
                sid, turn, [e.model_copy(update={"turn": turn, "seq": n}) for n, e in enumerate(events)]
            )
        record = store.get_session(sid)
        assert record is not None
        store.put_session(record.model_copy(update={"turns": turns, "updated_at": time.time()}))

        async def subscribe() -> tuple[int, float, Counter[str]]:
            headers = {"Authorization": f"Bearer {server.key}", "Accept": "text/event-stream"}
            url = f"{server.url}/v1/sessions/{sid}/events?after=0:-1"
            async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as http:
                responses = [await http.get(url, headers=headers) for _ in range(100)]
                assert {r.status for r in responses} == {200}
                async with asyncio.timeout(60):
                    counts = await asyncio.gather(
                        *(_read_until(r, f"{turns}:{per_turn - 1}") for r in responses)
                    )
                assert set(counts) == {turns * per_turn}  # every stored event once, to each
                before = Counter(server.store.calls)
                cpu = time.process_time()
                await asyncio.sleep(3.0)  # 100 idle streams: keep-alives only
                used = time.process_time() - cpu
                for r in responses:
                    r.release()
            return len(responses), used, Counter(server.store.calls) - before

        opened, cpu, idle_calls = asyncio.run(subscribe())
        assert opened == 100
        assert server.store.calls["read_events"] <= 110  # the backlog, once per stream (+ a tail read)
        assert idle_calls["read_events"] == 0, idle_calls
        assert idle_calls["get_session"] <= 6, idle_calls  # one watch for the session, ~1 read a second
        assert cpu < 0.9, f"100 idle streams used {cpu:.2f} s of CPU in 3 s"


def test_streams_over_the_per_key_or_per_session_cap_get_429(tmp_path: Path) -> None:
    def tune(app: web.Application) -> None:
        app[STREAM_LIMITS] = StreamLimits(per_key=2, per_session=3)

    with LoadServer(tmp_path, tune) as server:
        sid = server.new_session()
        url = f"{server.url}/v1/sessions/{sid}/events"

        async def streams() -> None:
            async with aiohttp.ClientSession() as http:

                async def open_as(key: str) -> aiohttp.ClientResponse:
                    return await http.get(url, headers={"Authorization": f"Bearer {key}"})

                mine = [await open_as(server.key) for _ in range(2)]
                assert [r.status for r in mine] == [200, 200]
                over = await open_as(server.key)
                assert over.status == 429
                body = await over.json()
                assert body["error"] == "too_many_streams" and body["field"] == "streams_per_key"
                assert "2 open event streams" in body["message"]
                admin = await open_as(server.admin)  # the session's third stream, another key
                assert admin.status == 200
                crowded = await open_as(server.admin)
                assert crowded.status == 429
                assert (await crowded.json())["field"] == "streams_per_session"
                mine[0].close()  # a closed stream frees its place
                again = await open_as(server.key)
                for _ in range(50):
                    if again.status == 200:
                        break
                    again.release()
                    await asyncio.sleep(0.1)
                    again = await open_as(server.key)
                assert again.status == 200
                for r in (*mine, admin, again):
                    r.close()

        asyncio.run(streams())


def test_unknown_key_ids_make_no_store_read_and_repeated_401s_get_429(tmp_path: Path) -> None:
    def tune(app: web.Application) -> None:
        app[AUTH_FAILURES] = AuthFailures(limit=400, window=10.0, cooldown=1.0)

    with LoadServer(tmp_path, tune) as server:
        assert server.call("/v1/sessions", server.key)[0] == 200  # the key list is read once here
        before = Counter(server.store.calls)

        async def flood() -> list[int]:
            async with aiohttp.ClientSession() as http:

                async def one(n: int) -> int:
                    key = f"hrk_{n:08x}_{'s' * 32}"
                    async with http.get(
                        f"{server.url}/v1/sessions", headers={"Authorization": f"Bearer {key}"}
                    ) as r:
                        return r.status

                return await asyncio.gather(*(one(n) for n in range(300)))

        statuses = asyncio.run(flood())
        assert set(statuses) == {401}
        reads = Counter(server.store.calls) - before
        assert reads["get_api_key"] == 0 and reads["list_api_keys"] == 0, reads
        assert server.call("/v1/sessions", server.key)[0] == 200


def test_repeated_401s_from_one_client_get_429_for_a_cool_down(tmp_path: Path) -> None:
    def tune(app: web.Application) -> None:
        app[AUTH_FAILURES] = AuthFailures(limit=20, window=10.0, cooldown=1.5)

    with LoadServer(tmp_path, tune) as server:
        wrong = [server.call("/v1/sessions", f"hrk_{n:08x}_wrong")[0] for n in range(20)]
        assert set(wrong) == {401}
        status, body = server.call("/v1/sessions", "hrk_00000000_wrong")
        assert status == 429 and body["error"] == "too_many_failures", body
        assert "wait 1.5 s" in body["message"]
        # a good key still works from the cooling-down address (a shared NAT, a front end)
        assert server.call("/v1/sessions", server.key)[0] == 200
        assert server.call("/healthz")[0] == 200  # open routes are not held back
        assert server.call("/v1/sessions", "hrk_00000001_wrong")[0] == 429
        time.sleep(1.6)
        assert server.call("/v1/sessions", "hrk_00000002_wrong")[0] == 401  # cooled down


def test_request_handlers_make_no_store_call_on_the_event_loop(tmp_path: Path) -> None:
    """Every route a client calls, each answered without a store call on the server's event loop
    (a slow store — a bucket — would hold up every other request meanwhile)."""
    with LoadServer(tmp_path) as server:
        server.store.on_loop.clear()  # start-up (engines recorded) is before any request
        sid = server.new_session()
        assert server.call("/v1/sessions", server.key)[0] == 200
        assert server.call(f"/v1/sessions/{sid}", server.key)[0] == 200
        assert server.call(f"/v1/sessions/{sid}/history", server.key)[0] == 200
        assert server.call(f"/v1/sessions/{sid}/events?format=json", server.key)[0] == 200
        assert server.call("/v1/engines", server.key)[0] == 200
        assert server.call("/v1/keys/me", server.key)[0] == 200
        assert server.call("/v1/sessions", "hrk_0badc0de_unknown")[0] == 401
        # a turn start (refused at once for a missing key: the reservation path still runs first)
        server.call(f"/v1/sessions/{sid}/turns", server.key, {"prompt": "hi", "secrets": {}})
        assert server.call(f"/v1/sessions/{sid}/interrupt", server.key, {})[0] == 200
        request = urllib.request.Request(f"{server.url}/v1/sessions/{sid}", method="DELETE")
        request.add_header("Authorization", f"Bearer {server.key}")
        with urllib.request.urlopen(request, timeout=30) as answer:
            assert answer.status == 204
        assert server.store.calls, "the store was used"
        assert not server.store.on_loop, dict(server.store.on_loop)
