"""Turns are exclusive across processes, and a turn never outlives the process that owns it.

Real client processes (``turns_proc.py``) on one local session, real harness CLIs, the scripted
model: two processes sending at once — exactly one runs; a client SIGKILLed mid-turn — no harness
or tool process of that turn remains, a new process re-attaches to a consistent history (the turn
stored as interrupted) and its next ``send()`` works the first time, resuming the conversation.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from harness_run.errors import SessionBusyError, UsageError
from harness_run.events import UserEvent
from harness_run.store import SqliteStore
from harness_run.testing import ScriptedModel, shell, text

from ._harnesses import HARNESS, HARNESSES
from ._helpers import claude_descendants, model_secrets, processes_with, wait_until
from .conftest import EngineFactory

pytestmark = pytest.mark.harness

HELPER = Path(__file__).with_name("turns_proc.py")


def client(*args: str, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, str(HELPER), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, **(env or {})},
    )


def outcome(proc: subprocess.Popen[str], timeout: float = 120) -> dict[str, Any]:
    out, err = proc.communicate(timeout=timeout)
    assert proc.returncode == 0, f"client process failed ({proc.returncode}):\n{err[-3000:]}"
    return json.loads(out.strip().splitlines()[-1])


def session_processes(home: Path) -> dict[int, str]:
    """pid -> command line of every live process running with the session's HOME (harness + tools)."""
    marker = f"\0HOME={home}\0".encode()
    found: dict[int, str] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            environ = Path(entry.path, "environ").read_bytes()
            stat = Path(entry.path, "stat").read_bytes()
            cmdline = Path(entry.path, "cmdline").read_bytes()
        except OSError:
            continue
        if marker in b"\0" + environ and b") Z " not in stat:
            found[int(entry.name)] = cmdline.replace(b"\0", b" ").decode(errors="replace")
    return found


TRANSCRIPTS = {"claude-code": "*.jsonl", "codex": "rollout-*.jsonl", "opencode": "opencode.db*"}


def transcript_has(session_dir: Path, harness: str, text: str) -> bool:
    """Whether the harness's own session files (what a resume reads) under ``session_dir`` hold ``text``."""
    for path in session_dir.rglob(TRANSCRIPTS[harness]):
        with contextlib.suppress(OSError):
            if text.encode() in path.read_bytes():
                return True
    return False


def wait_for(check: Any, within: float, what: str) -> Any:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        got = check()
        if got:
            return got
        time.sleep(0.05)
    raise AssertionError(f"timed out after {within} s waiting for {what}")


def test_two_processes_sending_at_once_exactly_one_runs(
    model: ScriptedModel, workdir: Path, make_engine: EngineFactory
) -> None:
    sid = make_engine(model="claude-sonnet-4-6").start_session().session_id
    model.add(text("the winner's answer"), text("the loser ran too"))
    go = workdir / "go"
    racers = [
        client("send", str(workdir), "claude-code", model.url, sid, f"racer {i}", str(go)) for i in (1, 2)
    ]
    for racer in racers:
        assert racer.stdout is not None
        assert "ready" in racer.stdout.readline()
    go.touch()
    outcomes = [outcome(r) for r in racers]

    assert sorted(o["outcome"] for o in outcomes) == ["busy", "ran"], outcomes
    [ran] = [o for o in outcomes if o["outcome"] == "ran"]
    [busy] = [o for o in outcomes if o["outcome"] == "busy"]
    assert ran["result"]["text"] == "the winner's answer"
    assert ran["result"]["turn"] == 1
    assert busy["error"] == (
        f"session {sid} turn 1 was already started by another client; wait for it and re-attach with "
        f"engine.get_session({sid!r})"
    )
    assert len(model.main_requests) == 1  # the loser never reached the model
    store = SqliteStore(workdir)
    try:
        [turn] = store.list_turns(sid)
        assert turn.result is not None and turn.result.text == "the winner's answer"
        events = store.read_events(sid, 1)
        assert [e.type for e in events].count("result") == 1
        assert [e.type for e in events].count("user") == 1  # the record and the events are one caller's
        assert getattr(events[0], "text", None) == turn.prompt == model.main_requests[0].last_user_text
    finally:
        store.close()


@pytest.mark.parametrize("harness", HARNESSES)
def test_a_client_killed_mid_turn_leaves_no_process_and_the_session_goes_on(
    model: ScriptedModel, workdir: Path, harness: str
) -> None:
    marker, command = HARNESS[harness].long_command(30)
    model.add(shell(command), text("never reached"))
    sid = str(uuid.uuid4())
    home = workdir / "sessions" / sid / "home"
    owner = client("start", str(workdir), harness, model.url, sid, "first prompt alpha")
    wait_for(lambda: processes_with(marker), 60, "the tool command to start")
    assert session_processes(home)  # the harness and its tool run with the session's HOME
    store = SqliteStore(workdir)
    try:  # the owner's heartbeat has put the turn so far into the store (the harness's session id)
        wait_for(lambda: "started" in [e.type for e in store.read_events(sid, 1)], 30, "the flushed events")
    finally:
        store.close()

    # the harnesses write their transcripts asynchronously (as in a69cfac): a kill before the write
    # loses the prompt from the resumed conversation (resume promises the transcript as far as the
    # harness wrote it), so kill once the prompt is in the harness's own session files
    wait_for(
        lambda: transcript_has(workdir / "sessions" / sid, harness, "first prompt alpha"),
        30,
        "the transcript",
    )
    owner.send_signal(signal.SIGKILL)
    owner.communicate(timeout=10)
    wait_for(lambda: not session_processes(home), 30, "the turn's processes to end")
    assert session_processes(home) == {}
    assert processes_with(marker) == {}

    model.script.clear()
    model.add(text("after the kill"))
    nxt = outcome(client("send", str(workdir), harness, model.url, sid, "second prompt bravo"))
    assert nxt["status"] == "idle"
    assert nxt["turns"] == 1
    assert nxt["history"] == [{"turn": 1, "prompt": "first prompt alpha", "stop_reason": "interrupted"}]
    types = [t for turn, t in nxt["events"] if turn == 1]
    assert types[:2] == ["user", "started"]
    assert types[-1] == "result"
    assert types.count("result") == 1
    assert nxt["outcome"] == "ran", nxt
    result = nxt["result"]
    assert not result["is_error"], result["error"]
    assert result["text"] == "after the kill"
    assert result["turn"] == 2
    request = model.main_requests[-1]
    assert request.last_user_text == "second prompt bravo"
    assert "first prompt alpha" in request.user_texts  # resumed natively: the killed turn is context
    assert session_processes(home) == {}


async def test_a_turn_whose_lease_expired_is_stored_as_interrupted(
    make_engine: EngineFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HARNESS_RUN_TURN_LEASE", "1")
    engine = make_engine()
    sid = engine.start_session().session_id
    store = engine.store
    other = make_engine()  # another process's view: nothing held in memory (made before the
    # reservation: making it inside the 1 s lease could outlast the lease on a loaded machine)
    # a client on another machine reserved turn 1 and wrote its prompt, then went silent
    store.reserve_turn(sid, 1, "elsewhere:4242:99:0123456789ab")
    store.append_events(sid, 1, [UserEvent(text="the lost prompt", seq=0, turn=1, ts=time.time())])
    with pytest.raises(SessionBusyError, match=f"session {sid} turn 1 was already started by another client"):
        other.get_session(sid).run("too early", secrets={"ANTHROPIC_API_KEY": "k"})  # lease still live
    assert store.list_turns(sid) == []

    await asyncio.sleep(1.1)  # no renewal for longer than the lease: the owner is gone
    third = make_engine()
    session = third.get_session(sid)
    assert session.record.turns == 1
    assert session.status == "idle"
    assert session.last_result is not None and session.last_result.stop_reason == "interrupted"
    assert "ended before the turn did" in (session.last_result.error or "")
    [turn] = session.history()
    assert (turn.turn, turn.prompt) == (1, "the lost prompt")
    assert [e.type for e in session.events(1)] == ["user", "result"]
    assert make_engine().get_session(sid).record.turns == 1  # finished once, not again


def test_a_bad_lease_setting_is_a_clear_error(
    make_engine: EngineFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HARNESS_RUN_TURN_LEASE", "soon")
    with pytest.raises(UsageError, match=r"HARNESS_RUN_TURN_LEASE='soon' is not a number of seconds >= 1"):
        make_engine()


async def test_a_killed_harness_cli_takes_its_tool_processes_with_it(
    model: ScriptedModel, make_engine: EngineFactory
) -> None:
    marker, command = HARNESS["claude-code"].long_command(30)
    model.add(shell(command), text("never reached"))
    session = make_engine().start_session()
    run = session.run("run the long command", secrets=model_secrets(model))
    await wait_until(lambda: processes_with(marker), within=30.0, what="the tool command to start")
    [cli] = [pid for pid, line in claude_descendants().items() if " -p " in f" {line} "]
    os.kill(cli, signal.SIGKILL)  # the CLI dies; its tool commands, re-parented, must not live on
    result = await run
    assert result.is_error
    assert "exit" in (result.error or "")
    await wait_until(lambda: not processes_with(marker), within=30.0, what="the tool processes to end")
    assert processes_with(marker) == {}
