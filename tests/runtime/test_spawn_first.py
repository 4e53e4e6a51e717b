"""Spawn first: a fresh ``harness-run run`` starts ``claude`` from the workdir's launch-plan cache
before it imports pydantic, and the local engine adopts it once the spec is validated and the plans
agree. Driven as a user runs it — the console script in fresh processes, the real ``claude`` (through
a wrapper that logs each start) against the scripted model — and read back from the cache directory,
the store and ``/proc``."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from harness_run import __version__, _launch
from harness_run.cli._prespawn import cache_flags
from harness_run.harness.claude_code import ClaudeCodeDriver
from harness_run.store import SqliteStore
from harness_run.testing import ScriptedModel, shell, text

from ._helpers import EXE, processes_with, run_console

SPEC = "name: sf\nharness: claude-code\nmodel: claude-sonnet-4-6\nsecrets: [DEPLOY_TOKEN]\n"
KEY_CANARY = "sk-canary-key-7Hq2x9"
TOKEN_CANARY = "deploy-canary-Zr41mQ"

pytestmark = pytest.mark.harness


class Cli:
    """``harness-run run`` in fresh processes on one workdir; ``claude`` is a wrapper that appends
    its pid to ``starts`` (and, while ``hang`` exists, sleeps instead of running ``claude``)."""

    def __init__(self, model: ScriptedModel, root: Path) -> None:
        self.root = root
        self.workdir = root / "wd"
        self.spec = root / "spec.yaml"
        self.spec.write_text(SPEC)
        self.starts = root / "starts"
        self.hang = root / "hang"
        wrapper = root / "claude"
        wrapper.write_text(
            f"#!/bin/sh\necho $$ >> {self.starts}\n"
            f"[ -e {self.hang} ] && exec sleep 600\n"
            f'exec {ClaudeCodeDriver().locate()} "$@"\n'
        )
        wrapper.chmod(0o755)
        self.env = {
            **os.environ,
            "ANTHROPIC_BASE_URL": model.url,
            "ANTHROPIC_API_KEY": KEY_CANARY,
            "DEPLOY_TOKEN": TOKEN_CANARY,
            "HARNESS_RUN_HOME": str(self.workdir),
            "HARNESS_RUN_CLAUDE_BIN": str(wrapper),
        }
        self.env.pop(_launch.TURN_ENV, None)

    def argv(self, prompt: str = "do it") -> list[str]:
        return [EXE, "run", str(self.spec), prompt, "--json", "--secret", "DEPLOY_TOKEN"]

    def run(
        self, *args: str, drop: str | None = None, prompt: str = "do it"
    ) -> tuple[int, list[dict[str, Any]], str]:
        env = {k: v for k, v in self.env.items() if k != drop}
        return run_console([*self.argv(prompt)[1:], *args], env)

    def spawns(self) -> int:
        return len(self.starts.read_text().split()) if self.starts.exists() else 0

    def entries(self) -> dict[str, os.stat_result]:
        folder = self.workdir / "launch-cache"
        return {p.name: p.stat() for p in folder.glob("*.json")} if folder.is_dir() else {}

    def sessions(self) -> list[str]:
        folder = self.workdir / "sessions"
        return sorted(p.name for p in folder.iterdir()) if folder.is_dir() else []


def _normal(events: list[dict[str, Any]]) -> list[Any]:
    """The events without what differs from run to run (ids, times, the session id); text deltas
    joined per message (how the stream was cut is not the turn's)."""
    sid = events[-1]["result"]["session_id"]
    out: list[Any] = []
    for event in events:
        if event["type"] == "delta":
            continue
        event = {k: v for k, v in event.items() if k not in ("ts", "message_id", "tool_use_id", "raw")}
        if event["type"] == "result":
            event["result"] = {
                k: v for k, v in event["result"].items() if k not in ("duration_s", "resources")
            }
        out.append(json.loads(json.dumps(event).replace(sid, "SID")))
    deltas = "".join(e["text"] for e in events if e["type"] == "delta")
    return [out, deltas]


def _history(workdir: Path, session_id: str) -> list[Any]:
    store = SqliteStore(workdir)
    try:
        turns = [
            t.model_dump(mode="json", exclude={"started_at", "result"}) for t in store.list_turns(session_id)
        ]
        events = [e.model_dump(mode="json") for e in store.read_events(session_id)]
    finally:
        store.close()
    return [json.loads(json.dumps(turns).replace(session_id, "SID")), _normal(events)]


def test_a_cached_plan_spawns_claude_first_and_the_turn_is_the_same(
    model: ScriptedModel, tmp_path: Path
) -> None:
    cli = Cli(model, tmp_path)
    for _ in range(2):  # the same turn twice: a tool that reads the per-run secret, then the answer
        model.add(shell('echo "$DEPLOY_TOKEN" > token.txt'), text("done"))

    code, first, stderr = cli.run()  # a miss: launched normally, the entry written
    assert code == 0, stderr
    (entry,) = cli.entries()
    assert cli.spawns() == 1
    before = cli.entries()[entry]

    code, second, stderr = cli.run()  # a hit: claude spawned from the entry, then adopted
    assert code == 0, stderr
    assert cli.spawns() == 2  # one process for the turn: nothing was stopped and launched again
    after = cli.entries()[entry]
    assert (after.st_ino, after.st_mtime_ns) == (before.st_ino, before.st_mtime_ns)  # not rewritten

    assert second[-1]["result"]["is_error"] is False
    assert _normal(second) == _normal(first)
    one, two = (e[-1]["result"]["session_id"] for e in (first, second))
    assert cli.sessions() == sorted([one, two])
    assert _history(cli.workdir, two) == _history(cli.workdir, one)
    # the secret reached the agent by name, from this run's environment
    assert (cli.workdir / "sessions" / two / "workspace" / "token.txt").read_text().strip() == TOKEN_CANARY

    # the cache holds no secret value, in any form the redaction knows
    cache = b"".join(p.read_bytes() for p in (cli.workdir / "launch-cache").iterdir())
    for canary in (KEY_CANARY, TOKEN_CANARY):
        for form in (canary, base64.b64encode(f"x-access-token:{canary}".encode()).decode()):
            assert form.encode() not in cache
    assert b"DEPLOY_TOKEN" in cache  # its name is


def test_a_changed_spec_flag_or_stale_entry_misses_and_a_corrupt_one_is_ignored(
    model: ScriptedModel, tmp_path: Path
) -> None:
    cli = Cli(model, tmp_path)
    for _ in range(5):
        model.add(text("done"))
    code, _, stderr = cli.run()
    assert code == 0, stderr
    (name,) = cli.entries()
    entry = cli.workdir / "launch-cache" / name

    entry.write_text('{"format": 1, "argv": [')  # corrupt: ignored, the turn launched normally
    code, events, stderr = cli.run()
    assert (code, events[-1]["result"]["text"]) == (0, "done"), stderr
    assert "Traceback" not in stderr
    assert cli.spawns() == 2
    assert _launch.load(entry) is not None  # written again

    stale = json.loads(entry.read_text())  # out of date (as after a library change): stopped, relaunched
    stale["env"]["CLAUDE_CODE_MAX_RETRIES"] = "7"
    entry.write_text(json.dumps(stale))
    code, events, stderr = cli.run()
    assert (code, events[-1]["result"]["text"]) == (0, "done"), (stderr, events[-1]["result"])
    assert cli.spawns() == 4  # the one spawned first, and the one launched with the validated plan
    fixed = _launch.load(entry)
    assert fixed is not None and fixed.env["CLAUDE_CODE_MAX_RETRIES"] == "2"
    assert not processes_with(str(cli.workdir))

    code, _, stderr = cli.run("--model", "claude-opus-4-1")  # another flag: another entry
    assert code == 0, stderr
    assert len(cli.entries()) == 2 and cli.spawns() == 5
    cli.spec.write_text(SPEC + "env: {EXTRA: '1'}\n")  # another spec: another entry
    code, _, stderr = cli.run()
    assert code == 0, stderr
    assert len(cli.entries()) == 3 and cli.spawns() == 6


def _alive(pid: str) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rfind(")") + 2] != "Z"


def test_a_spec_that_fails_validation_after_the_spawn_leaves_no_process(
    model: ScriptedModel, tmp_path: Path
) -> None:
    cli = Cli(model, tmp_path)
    model.add(text("done"))
    code, _, stderr = cli.run()
    assert code == 0, stderr
    (name,) = cli.entries()
    sessions = cli.sessions()
    cli.hang.touch()  # from now on a "claude" spawned first sleeps for 10 minutes instead

    # a variable the entry names is not set: no spawn, and the usual error
    code, _, stderr = cli.run(drop="DEPLOY_TOKEN")
    assert code == 2 and "--secret DEPLOY_TOKEN" in stderr and "Traceback" not in stderr, stderr
    assert cli.spawns() == 1

    # a spec this library refuses, with an entry (as one an earlier library could have written)
    bad = tmp_path / "bad.yaml"
    bad.write_text(SPEC + "max_turns: -3\n")
    flags = cache_flags(None, ["DEPLOY_TOKEN"])
    key = _launch.cache_key(bad.resolve(), bad.read_bytes(), flags, version=__version__)
    _launch.entry_path(cli.workdir, key).write_bytes((cli.workdir / "launch-cache" / name).read_bytes())
    cli.spec = bad
    code, _, stderr = cli.run()
    assert code == 2 and "max_turns" in stderr and "Traceback" not in stderr, stderr
    assert cli.spawns() == 2  # it was spawned, then stopped: gone, with the session directory it had
    assert not _alive(cli.starts.read_text().split()[-1])
    assert cli.sessions() == sessions


def _until(check: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"not within {timeout:g} s: {what}"
        time.sleep(0.05)


def test_a_client_killed_after_spawning_first_takes_the_harness_with_it(
    model: ScriptedModel, tmp_path: Path
) -> None:
    """The harness and its reaper are spawned before the event loop exists (``os.posix_spawn``);
    the reaper still ends the harness when the client dies by SIGKILL."""
    cli = Cli(model, tmp_path)
    model.add(text("done"))
    code, _, stderr = cli.run()
    assert code == 0, stderr
    cli.hang.touch()  # the next "claude" spawned first sleeps instead
    client = subprocess.Popen(
        cli.argv(),
        env=cli.env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        _until(lambda: cli.spawns() == 2, 60, "the second run spawns its harness")
        harness = cli.starts.read_text().split()[-1]
        assert _alive(harness)
    finally:
        client.kill()
        client.wait(30)
    _until(lambda: not _alive(harness), 15, "the harness of the killed client ends")


def test_a_prompt_larger_than_a_pipe_reaches_the_harness_spawned_first(
    model: ScriptedModel, tmp_path: Path
) -> None:
    """A prompt bigger than the stdin pipe holds (64 KiB) is written in part at the spawn and the
    rest once the event loop has taken the process over."""
    cli = Cli(model, tmp_path)
    model.add(text("done"), text("done too"))
    code, _, stderr = cli.run()
    assert code == 0, stderr
    prompt = "".join(
        f"line {i}: the quick brown fox\n" for i in range(3500)
    )  # ~100 KB (an argument holds 128 KiB)
    code, events, stderr = cli.run(prompt=prompt)
    assert code == 0, stderr
    assert cli.spawns() == 2  # one harness for the second run: spawned first and adopted
    assert events[0]["type"] == "user" and events[0]["text"] == prompt
    assert events[-1]["result"]["text"] == "done too"
    assert prompt.strip() in model.requests[-1].last_user_text


def test_a_process_spawned_before_the_event_loop_is_adopted_with_its_stdin_and_exit_status(
    tmp_path: Path,
) -> None:
    """What spawn first relies on, with plain tools: the stdin that did not fit in the pipe is
    written after adoption and then closed (``cat`` sees its end and exits); output and exit status
    come back as from ``asyncio.create_subprocess_exec``, signals as negative codes."""
    import asyncio

    from harness_run._launch import adopt

    data = os.urandom(150_000).hex().encode()  # 300 KB: several pipe buffers
    env = {"PATH": os.environ["PATH"]}
    cat = _launch.spawn_raw(["cat"], cwd=str(tmp_path), env=env, stdin=data)
    assert cat.pending and cat.stdin is not None
    sleeper = _launch.spawn_raw(["sleep", "30"], cwd=None, env=env, keep_stdin_open=True)
    pwd = _launch.spawn_raw(["sh", "-c", "pwd; exit 3"], cwd=str(tmp_path), env=env)

    async def main() -> tuple[bytes, int, int, bytes, int]:
        proc = await adopt(cat)
        assert proc.stdout is not None
        out = await proc.stdout.read()
        code = await proc.wait()
        slept = await adopt(sleeper)
        os.kill(slept.pid, 15)
        here = await adopt(pwd)
        assert here.stdout is not None
        return out, code, await slept.wait(), await here.stdout.read(), await here.wait()

    out, code, signalled, where, three = asyncio.run(main())
    assert out == data and code == 0
    assert signalled == -15
    assert where.decode().strip() == str(tmp_path) and three == 3
    assert os.getcwd() != str(tmp_path)  # the spawn changed directory only around itself
    with pytest.raises(FileNotFoundError):
        _launch.spawn_raw(["no-such-binary-hr"], cwd=None, env=env)
