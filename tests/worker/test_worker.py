"""The worker as a real process (``python -m harness_run.worker``) running the real ``claude`` CLI against
the scripted model, reached through ``WorkerClient`` and raw HTTP: auth, turns, the SSE stream and its
resume, idempotency, busy, steer/interrupt, exec, native resume on another worker, no secret leaks,
graceful SIGTERM."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from harness_run.errors import InfrastructureError, SessionBusyError, UsageError
from harness_run.events import ToolUseEvent, parse_event
from harness_run.runtime.worker_client import TurnRequest, WorkerClient
from harness_run.store import HistoryStore
from harness_run.testing import ScriptedModel, error, shell, text

from .conftest import CANARY, TOKEN, WorkerFactory, WorkerProcess, model_secrets, new_session

pytestmark = [pytest.mark.harness, pytest.mark.integration]

ReadStore = Callable[[str], HistoryStore]


def long_command(seconds: int) -> tuple[str, str]:
    marker = f"sleep {seconds}.{uuid.uuid4().int % 10**6:06d}"
    return marker, f"bash -c '{marker}; echo finished'"


def turn(sid: str, prompt: str, model: ScriptedModel, **extra: Any) -> TurnRequest:
    secrets = model_secrets(model, **extra.pop("secrets", {}))
    return TurnRequest(turn_id=uuid.uuid4().hex, session_id=sid, prompt=prompt, secrets=secrets, **extra)


async def collect(client: WorkerClient, turn_id: str, after: int = -1) -> list[dict[str, Any]]:
    return [e async for e in client.events(turn_id, after)]


async def wait_for(check: Callable[[], Any], within: float = 30.0, what: str = "condition") -> Any:
    for _ in range(int(within / 0.05)):
        value = check()
        if value:
            return value
        await asyncio.sleep(0.05)
    pytest.fail(f"timed out waiting for {what}")


async def test_health_needs_no_token_and_everything_else_does(
    start_worker: WorkerFactory, sqlite_url: str, model: ScriptedModel, read_store: ReadStore
) -> None:
    worker = start_worker(sqlite_url)
    sid = new_session(sqlite_url)
    async with aiohttp.ClientSession() as http:
        async with http.get(f"{worker.url}/healthz") as resp:
            assert resp.status == 200
            body = await resp.json()
        assert body["status"] == "ok"
        assert body["digest"] == "test-digest"
        assert body["busy"] is False
        request = turn(sid, "should never run", model).model_dump()
        for headers in ({}, {"Authorization": "Bearer wrong-token"}, {"Authorization": TOKEN}):
            async with http.post(f"{worker.url}/v1/turns", json=request, headers=headers) as resp:
                assert resp.status == 401
                assert (await resp.json())["error"] == "unauthorized"
            async with http.post(
                f"{worker.url}/v1/exec", json={"session_id": sid, "command": "touch /tmp/x"}, headers=headers
            ) as resp:
                assert resp.status == 401
    assert model.requests == []
    store = read_store(sqlite_url)
    assert store.list_turns(sid) == []
    record = store.get_session(sid)
    assert record is not None and record.turns == 0

    async with WorkerClient(worker.url, "wrong") as client:
        with pytest.raises(InfrastructureError, match="refused the bearer token"):
            await client.start_turn(turn(sid, "nope", model))
        assert (await client.health()).status == "ok"


async def test_a_turn_streams_events_and_a_stored_result(
    start_worker: WorkerFactory, store_url: str, model: ScriptedModel, read_store: ReadStore
) -> None:
    model.add(shell("printf 'from the worker' > made.txt"), text("all done"))
    worker = start_worker(store_url)
    sid = new_session(store_url)
    async with WorkerClient(worker.url, TOKEN) as client:
        info = await client.start_turn(turn(sid, "make a file", model))
        assert (info.session_id, info.turn, info.status) == (sid, 1, "running")
        events = await collect(client, info.turn_id)
        assert (await client.turn(info.turn_id)).status == "completed"
        assert not (await client.health()).busy

    deltas = [e for e in events if e["type"] == "delta"]  # streamed text: live only, never stored
    assert "".join(e["text"] for e in deltas) == "all done"
    events = [e for e in events if e["type"] != "delta"]
    types = [e["type"] for e in events]
    assert types[0] == "user"
    assert "tool_use" in types and "tool_result" in types
    assert types[-1] == "result"
    assert [e["seq"] for e in events] == list(range(len(events)))
    result = events[-1]["result"]
    assert result["text"] == "all done"
    assert not result["is_error"]
    assert result["session_id"] == sid

    # the result was stored before it was served: the store has every event, once, and the records
    store = read_store(store_url)
    stored = store.read_events(sid, 1)
    assert [e.seq for e in stored] == [e["seq"] for e in events]
    assert stored == [parse_event(e) for e in events]  # the same typed events as were streamed
    [record] = store.list_turns(sid)
    assert record.prompt == "make a file"
    assert record.result is not None and record.result.text == "all done"
    session = store.get_session(sid)
    assert session is not None
    assert (session.turns, session.status, session.native_started) == (1, "idle", True)
    assert session.snapshot is not None  # the worker always checkpoints: another sandbox can resume


async def test_events_are_flushed_during_the_turn_and_the_stream_resumes_exactly(
    start_worker: WorkerFactory, sqlite_url: str, model: ScriptedModel, read_store: ReadStore
) -> None:
    marker, command = long_command(2)
    model.add(shell(command), text("after the sleep"))
    worker = start_worker(sqlite_url)
    sid = new_session(sqlite_url)
    store = read_store(sqlite_url)
    async with WorkerClient(worker.url, TOKEN) as client:
        info = await client.start_turn(turn(sid, "sleep a bit", model))
        # mid-turn: the tool call is in the store before the turn ends (flushed within 0.5 s)
        stored = await wait_for(
            lambda: [e for e in store.read_events(sid, 1) if isinstance(e, ToolUseEvent)], what="a flush"
        )
        assert marker in stored[0].input["command"]
        assert store.list_turns(sid) == []  # not finished yet

        # a raw SSE read of the first two events, then the connection is dropped
        async with (
            aiohttp.ClientSession(headers={"Authorization": f"Bearer {TOKEN}"}) as http,
            http.get(f"{worker.url}/v1/turns/{info.turn_id}/events") as resp,
        ):
            assert resp.headers["Content-Type"].startswith("text/event-stream")
            first = await resp.content.readuntil(b"\n\n")
            second = await resp.content.readuntil(b"\n\n")
        assert first.startswith(b"id: 1:0\nevent: user\ndata: ")  # <turn>:<seq>, as the team server's
        assert second.startswith(b"id: 1:1\n")
        rest = await collect(client, info.turn_id, after=1)  # resume from seq 1
        everything = await collect(client, info.turn_id)
    # the live stream had the answer's text deltas; a finished turn replays none
    assert "".join(e["text"] for e in rest if e["type"] == "delta") == "after the sleep"
    assert not [e for e in everything if e["type"] == "delta"]
    rest = [e for e in rest if e["type"] != "delta"]
    assert [e["seq"] for e in rest] == list(range(2, len(everything)))
    assert rest == everything[2:]
    assert everything[-1]["result"]["text"] == "after the sleep"

    # Last-Event-ID and ?after= give exactly the missing events of a finished turn
    async with aiohttp.ClientSession(headers={"Authorization": f"Bearer {TOKEN}"}) as http:
        for kwargs in (
            {"headers": {"Last-Event-ID": "1:3"}},
            {"params": {"after": "1:3"}},
            {"headers": {"Last-Event-ID": "3"}},  # a bare seq, as clients before the one id scheme sent
        ):
            async with http.get(f"{worker.url}/v1/turns/{info.turn_id}/events", **kwargs) as resp:
                body = (await resp.read()).decode()
            ids = [line[4:] for line in body.splitlines() if line.startswith("id: ")]
            assert ids == [f"1:{seq}" for seq in range(4, len(everything))]
    assert store.read_events(sid, 1) == [parse_event(e) for e in everything]


async def test_the_same_turn_id_is_idempotent_and_a_second_turn_gets_409(
    start_worker: WorkerFactory, sqlite_url: str, model: ScriptedModel
) -> None:
    _marker, command = long_command(2)
    model.add(shell(command), text("one turn only"), text("spare"))
    worker = start_worker(sqlite_url)
    sid = new_session(sqlite_url)
    async with WorkerClient(worker.url, TOKEN) as client:
        request = turn(sid, "first", model)
        info = await client.start_turn(request)
        again = await client.start_turn(request)
        assert again == info
        assert (await client.health()).busy
        with pytest.raises(SessionBusyError, match="wait for it"):
            await client.start_turn(turn(sid, "second", model))
        async with (
            aiohttp.ClientSession(headers={"Authorization": f"Bearer {TOKEN}"}) as http,
            http.post(f"{worker.url}/v1/turns", json=turn(sid, "third", model).model_dump()) as resp,
        ):
            assert resp.status == 409
            assert (await resp.json())["error"] == "session_busy"
        events = await collect(client, info.turn_id)
        assert events[-1]["result"]["text"] == "one turn only"
        finished = await client.start_turn(request)  # after the end: still the same turn
        assert (finished.turn, finished.status) == (1, "completed")
    assert model.remaining == 1
    prompts = [t for r in model.main_requests for t in r.user_texts]
    assert prompts and not any("second" in p or "third" in p for p in prompts)


async def test_bad_bodies_get_422_naming_the_field(
    start_worker: WorkerFactory, sqlite_url: str, model: ScriptedModel
) -> None:
    worker = start_worker(sqlite_url)
    sid = new_session(sqlite_url)
    async with aiohttp.ClientSession(headers={"Authorization": f"Bearer {TOKEN}"}) as http:
        async with http.post(f"{worker.url}/v1/turns", json={"turn_id": "t", "session_id": sid}) as resp:
            assert resp.status == 422
            assert (await resp.json())["field"] == "prompt"
        async with http.post(f"{worker.url}/v1/turns", data=b"{not json") as resp:
            assert resp.status == 422
        bad = turn(sid, "x", model, secrets={"UNDECLARED": "value-123456"}).model_dump()
        async with http.post(f"{worker.url}/v1/turns", json=bad) as resp:
            assert resp.status == 400
            body = await resp.json()
        assert "UNDECLARED" in body["message"] and "value-123456" not in body["message"]
        unknown = turn(str(uuid.uuid4()), "x", model).model_dump()
        async with http.post(f"{worker.url}/v1/turns", json=unknown) as resp:
            assert resp.status == 404
    async with WorkerClient(worker.url, TOKEN) as client:
        with pytest.raises(UsageError, match="not declared"):
            await client.start_turn(turn(sid, "x", model, secrets={"UNDECLARED": "v"}))
    assert model.requests == []


async def test_steer_and_interrupt(
    start_worker: WorkerFactory, sqlite_url: str, model: ScriptedModel, read_store: ReadStore
) -> None:
    marker, command = long_command(2)
    model.add(shell(command), text("saw the steer"))
    worker = start_worker(sqlite_url)
    sid = new_session(sqlite_url)
    async with WorkerClient(worker.url, TOKEN) as client:
        info = await client.start_turn(turn(sid, "start working", model))
        seen: list[dict[str, Any]] = []
        async for event in client.events(info.turn_id):
            seen.append(event)
            if event["type"] == "tool_use":
                assert await client.steer(info.turn_id, "STEER: mention zebras", message_id="m1")
                assert await client.steer(info.turn_id, "STEER: mention zebras", message_id="m1")  # once
        assert seen[-1]["result"]["text"] == "saw the steer"
        users = [e["text"] for e in seen if e["type"] == "user"]
        assert users == ["start working", "STEER: mention zebras"]
        assert not await client.steer(info.turn_id, "too late")

        marker, command = long_command(30)
        model.add(shell(command), text("never reached"))
        second = await client.start_turn(turn(sid, "run the long one", model))
        assert second.turn == 2
        async for event in client.events(second.turn_id):
            if event["type"] == "tool_use":
                break
        assert await client.interrupt(second.turn_id)
        assert not await client.interrupt(second.turn_id)
        events = await collect(client, second.turn_id)
    result = events[-1]["result"]
    assert result["stop_reason"] == "interrupted"
    store = read_store(sqlite_url)
    records = store.list_turns(sid)
    assert [r.result.stop_reason for r in records if r.result] == ["completed", "interrupted"]
    assert records[0].steers == ["STEER: mention zebras"]
    assert marker not in worker.log


async def test_exec_in_the_session_workspace(
    start_worker: WorkerFactory, sqlite_url: str, model: ScriptedModel
) -> None:
    model.add(shell("printf 'exec me' > made.txt"), text("made"))
    worker = start_worker(sqlite_url)
    sid = new_session(sqlite_url)
    async with WorkerClient(worker.url, TOKEN) as client:
        info = await client.start_turn(turn(sid, "make it", model))
        await collect(client, info.turn_id)
        out = await client.exec(sid, "cat made.txt; echo; echo oops >&2; exit 3")
        assert (out.exit_code, out.stdout, out.stderr, out.truncated) == (3, "exec me\n", "oops\n", False)
        secret = await client.exec(sid, "echo $CANARY_TOKEN", secrets={"CANARY_TOKEN": CANARY})
        assert secret.exit_code == 0 and CANARY not in secret.stdout
        slow = await client.exec(sid, "sleep 20", timeout=0.5)
        assert slow.exit_code == 124
        with pytest.raises(UsageError, match="not declared"):
            await client.exec(sid, "true", secrets={"NOPE": "x"})
    assert CANARY not in worker.log


async def test_another_worker_resumes_the_session_natively_from_the_store(
    start_worker: WorkerFactory, gcs_store_url: str, model: ScriptedModel, read_store: ReadStore
) -> None:
    model.add(shell("printf 'turn one file' > made.txt"), text("turn one answer"), text("turn two answer"))
    sid = new_session(gcs_store_url)
    first = start_worker(gcs_store_url, name="first")
    async with WorkerClient(first.url, TOKEN) as client:
        info = await client.start_turn(turn(sid, "first prompt alpha", model))
        assert (await collect(client, info.turn_id))[-1]["result"]["text"] == "turn one answer"
    assert first.stop() == 0

    second = start_worker(gcs_store_url, name="second")  # another workdir: nothing local to reuse
    assert second.workdir != first.workdir
    async with WorkerClient(second.url, TOKEN) as client:
        made = await client.exec(sid, "cat made.txt")  # before any turn here: restored from the snapshot
        assert made.stdout == "turn one file"
        info = await client.start_turn(turn(sid, "second prompt bravo", model, turn=2))
        assert info.turn == 2
        events = await collect(client, info.turn_id)
        again = await client.exec(sid, "cat made.txt")
    assert events[-1]["result"]["text"] == "turn two answer"
    assert events[-1]["result"]["turn"] == 2
    assert again.stdout == "turn one file"
    # the model saw turn one's conversation: Claude Code resumed its own transcript
    last = model.main_requests[-1]
    texts = json.dumps(last.json)
    assert "first prompt alpha" in texts and "turn one answer" in texts and "second prompt bravo" in texts
    store = read_store(gcs_store_url)
    assert [t.turn for t in store.list_turns(sid)] == [1, 2]
    assert [e.turn for e in store.read_events(sid)][-1] == 2


async def test_a_turn_number_that_is_not_next_is_refused(
    start_worker: WorkerFactory, sqlite_url: str, model: ScriptedModel
) -> None:
    worker = start_worker(sqlite_url)
    sid = new_session(sqlite_url)
    async with WorkerClient(worker.url, TOKEN) as client:
        with pytest.raises(SessionBusyError, match="the next is 1, not 3"):
            await client.start_turn(turn(sid, "x", model, turn=3))
    assert model.requests == []


async def test_secret_values_never_reach_logs_events_or_errors(
    start_worker: WorkerFactory, sqlite_url: str, model: ScriptedModel, read_store: ReadStore
) -> None:
    model.add(
        shell("echo token=$CANARY_TOKEN"),  # (naming the model key would be refused by the guards)
        error(500, f"upstream failed: the token {CANARY} is not allowed"),
    )
    worker = start_worker(sqlite_url, env={"HARNESS_RUN_WORKER_LOG_LEVEL": "DEBUG"})
    sid = new_session(sqlite_url)
    secrets = {"CANARY_TOKEN": CANARY}
    async with WorkerClient(worker.url, TOKEN) as client:
        info = await client.start_turn(turn(sid, "leak it", model, secrets=secrets))
        events = await collect(client, info.turn_id)
        async with (
            aiohttp.ClientSession(headers={"Authorization": f"Bearer {TOKEN}"}) as http,
            http.get(f"{worker.url}/v1/turns/{info.turn_id}/events") as resp,
        ):
            raw = await resp.text()
        bad = turn(sid, "x", model, secrets={"NOT_DECLARED": CANARY})
        with pytest.raises(UsageError) as caught:
            await client.start_turn(bad)
    result = events[-1]["result"]
    assert result["is_error"], [(r.path, r.outcome, r.is_side) for r in model.requests]
    assert "the token *** is not allowed" in (result["error"] or "")
    tool_output = [e for e in events if e["type"] == "tool_result"]
    assert tool_output and "token=***" in json.dumps(tool_output)
    assert CANARY not in raw and "scripted-dummy-key" not in raw
    assert CANARY not in str(caught.value)
    stored = "".join(e.model_dump_json() for e in read_store(sqlite_url).read_events(sid))
    assert CANARY not in stored and "scripted-dummy-key" not in stored
    assert worker.stop() == 0
    assert CANARY not in worker.log and "scripted-dummy-key" not in worker.log
    assert TOKEN not in worker.log


async def test_sigterm_stops_the_running_turn_stores_it_and_exits_zero(
    start_worker: WorkerFactory, sqlite_url: str, model: ScriptedModel, read_store: ReadStore
) -> None:
    _marker, command = long_command(30)
    model.add(shell(command), text("never reached"))
    worker: WorkerProcess = start_worker(sqlite_url)
    sid = new_session(sqlite_url)
    async with WorkerClient(worker.url, TOKEN, unreachable_after=2) as client:
        info = await client.start_turn(turn(sid, "long one", model))
        streamed: list[dict[str, Any]] = []
        # one stream, read on through the shutdown: a second reader started a fixed delay before the
        # SIGTERM raced the worker closing its listener
        async for event in client.events(info.turn_id):
            streamed.append(event)
            if event["type"] == "tool_use":
                worker.proc.send_signal(signal.SIGTERM)
        code = await asyncio.to_thread(worker.proc.wait, 30)
    assert code == 0
    assert streamed[-1]["result"]["stop_reason"] == "interrupted"
    [record] = read_store(sqlite_url).list_turns(sid)
    assert record.result is not None and record.result.stop_reason == "interrupted"
    assert "shutting down" in worker.log


async def test_a_worker_that_dies_mid_turn_gives_the_client_a_clear_error(
    start_worker: WorkerFactory, sqlite_url: str, model: ScriptedModel, read_store: ReadStore
) -> None:
    marker, command = long_command(2)
    model.add(shell(command), text("never seen"))
    worker = start_worker(sqlite_url)
    sid = new_session(sqlite_url)
    store = read_store(sqlite_url)

    def flushed() -> bool:
        return "tool_use" in [e.type for e in store.read_events(sid, 1)]

    async with WorkerClient(worker.url, TOKEN, unreachable_after=1.0) as client:
        info = await client.start_turn(turn(sid, "die now", model))
        seen: list[str] = []

        async def follow() -> None:
            async for event in client.events(info.turn_id):
                seen.append(event["type"])
                if event["type"] == "tool_use":
                    # the worker flushes every 0.25 s, mid-turn: kill once that flush has stored the
                    # event (a fixed sleep here raced it on a loaded machine)
                    await wait_for(flushed, 20, "the worker's mid-turn flush of tool_use")
                    worker.proc.kill()  # SIGKILL: no graceful stop

        with pytest.raises(InfrastructureError) as caught:
            await follow()
    assert worker.url in str(caught.value)
    assert "could not re-connect" in str(caught.value)
    assert "tool_use" in seen
    # history up to the failure is in the store
    stored = [e.type for e in read_store(sqlite_url).read_events(sid, 1)]
    assert stored[:1] == ["user"] and "tool_use" in stored
    # the orphaned CLI's sleep ends; it exits on its closed pipes
    await wait_for(lambda: not _running(marker), 30, "the orphaned tool command to end")


def _running(marker: str) -> bool:
    """Whether a live process's command line contains ``marker``."""
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                if marker.encode() in Path(entry.path, "cmdline").read_bytes().replace(b"\0", b" "):
                    return True
    return False


def _alive(pids: set[int]) -> set[int]:
    out: set[int] = set()
    for pid in pids:
        with contextlib.suppress(OSError):
            if b") Z " not in Path(f"/proc/{pid}/stat").read_bytes():
                out.add(pid)
    return out


def _claude_under(pid: int) -> set[int]:
    """The live ``claude`` processes below ``pid`` (the worker)."""
    from harness_run.runtime._process import descendants

    found: set[int] = set()
    for child in descendants(pid):
        try:
            cmd = Path(f"/proc/{child}/cmdline").read_bytes()
            state = Path(f"/proc/{child}/stat").read_bytes()
        except OSError:
            continue
        if b"claude" in cmd and b") Z " not in state and b"_reaper" not in cmd:
            found.add(child)
    return found


async def test_the_worker_keeps_the_session_s_cli_between_its_turns(
    start_worker: WorkerFactory, gcs_store_url: str, model: ScriptedModel
) -> None:
    """Issue 25: a claimed sandbox's worker writes the session's next turn to the CLI that ran the
    last one; SIGTERM ends it with the worker."""
    model.add(text("turn one"), text("turn two"))
    sid = new_session(gcs_store_url)
    worker = start_worker(gcs_store_url, name="warm")
    async with WorkerClient(worker.url, TOKEN) as client:
        info = await client.start_turn(turn(sid, "first", model))
        assert (await collect(client, info.turn_id))[-1]["result"]["text"] == "turn one"
        kept = await asyncio.to_thread(_claude_under, worker.proc.pid)
        assert len(kept) == 1
        info = await client.start_turn(turn(sid, "second", model, turn=2))
        assert (await collect(client, info.turn_id))[-1]["result"]["text"] == "turn two"
        assert await asyncio.to_thread(_claude_under, worker.proc.pid) == kept
    assert len(model.main_requests[-1].messages) == 3  # the kept CLI had turn one's conversation
    assert worker.stop() == 0
    assert await asyncio.to_thread(_alive, kept) == set()
