"""Helpers shared by the runtime tests (imported relatively; fixtures live in conftest.py)."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from harness_run import AgentSpec
from harness_run.harness import TurnContext
from harness_run.runtime.local import LocalEngine
from harness_run.testing import ScriptedModel

MODEL = "claude-sonnet-4-6"
API_KEY = "scripted-dummy-key"
EXE = str(Path(sys.executable).parent / "harness-run")
"""The console script, as a user runs it (a fresh process: spawn first applies)."""


def run_console(
    argv: list[str], env: dict[str, str], cwd: Path | None = None
) -> tuple[int, list[dict[str, Any]], str]:
    """``harness-run ARGV`` in a fresh process: exit code, the JSON event lines of stdout, stderr."""
    done = subprocess.run(
        [EXE, *argv],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        stdin=subprocess.DEVNULL,
        cwd=cwd,
    )
    events = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    return done.returncode, events, done.stderr


def model_secrets(model: ScriptedModel, **extra: str) -> dict[str, str]:
    """The run's endpoint and a dummy key (plus any declared secrets)."""
    return {"ANTHROPIC_BASE_URL": model.url, "ANTHROPIC_API_KEY": API_KEY, **extra}


def workspace_of(engine: LocalEngine, session_id: str) -> Path:
    return engine.workdir / "sessions" / session_id / "workspace"


def _cmdline(pid: int | str) -> str | None:
    """The command line of a live (non-zombie) process, else None."""
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
        with open(f"/proc/{pid}/stat", "rb") as handle:
            stat = handle.read().decode(errors="replace")
    except OSError:
        return None
    if stat[stat.rfind(")") + 2 :].split()[:1] == ["Z"]:
        return None
    return raw.replace(b"\0", b" ").decode(errors="replace").strip()


def processes_with(marker: str) -> dict[int, str]:
    """pid -> command line of every live process (anywhere) whose command line contains ``marker``."""
    found: dict[int, str] = {}
    for entry in os.scandir("/proc"):
        if entry.name.isdigit() and int(entry.name) != os.getpid():
            cmd = _cmdline(entry.name)
            if cmd is not None and marker in cmd:
                found[int(entry.name)] = cmd
    return found


def claude_descendants() -> dict[int, str]:
    """Live descendants of this test process whose command line mentions ``claude``."""
    from harness_run.runtime._process import descendants

    out: dict[int, str] = {}
    for pid in descendants(os.getpid()):
        cmd = _cmdline(pid)
        if cmd is not None and "claude" in cmd:
            out[pid] = cmd
    return out


async def wait_until(check: Callable[[], Any], within: float = 20.0, what: str = "condition") -> Any:
    """Poll ``check`` every 50 ms until it returns something truthy; fail after ``within`` s."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within
    while loop.time() < deadline:
        value = check()
        if value:
            return value
        await asyncio.sleep(0.05)
    pytest.fail(f"timed out after {within} s waiting for {what}")


def turn_context(tmp_path: Path, harness: str, model: str, **changes: Any) -> TurnContext:
    """A TurnContext for testing a driver's pure parts; ``spec={...}`` changes spec fields."""
    spec = AgentSpec(name="a", harness=harness, model=model, **changes.pop("spec", {}))  # type: ignore[arg-type]
    fields: dict[str, Any] = {
        "spec": spec,
        "prompt": "-starts with a dash",
        "session_id": str(uuid.uuid4()),
        "turn": 1,
        "workspace": tmp_path / "ws",
        "home": tmp_path / "home",
        "env": {"OPENAI_API_KEY": "sk-secret-value", "PATH": "/usr/bin"},
        "resume": False,
    }
    return TurnContext(**{**fields, **changes})


def warm_pids(engine: LocalEngine) -> dict[str, int]:
    """Session id -> pid of each harness process the engine keeps (parked or pooled)."""
    return {w.session_id: w.pid for w in engine.warm_processes()}


def alive(pid: int) -> bool:
    """Whether ``pid`` is a live process (not gone, not a zombie)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            return b") Z " not in handle.read()
    except OSError:
        return False


def memory_holds(pid: int, needle: bytes) -> bool:
    """Whether ``needle`` is anywhere in the process's readable memory (or its environment, command
    line, or a file it maps); False for a process that is gone (it holds nothing)."""
    try:
        return _memory_holds(pid, needle)
    except (FileNotFoundError, ProcessLookupError):
        return False


def _memory_holds(pid: int, needle: bytes) -> bool:
    for name in ("environ", "cmdline"):
        if needle in Path(f"/proc/{pid}/{name}").read_bytes():
            return True
    with open(f"/proc/{pid}/maps") as maps, open(f"/proc/{pid}/mem", "rb", buffering=0) as mem:
        for line in maps:
            fields = line.split()
            if "r" not in fields[1]:
                continue
            start, end = (int(x, 16) for x in fields[0].split("-"))
            if len(fields) > 5 and fields[5].startswith("/") and Path(fields[5]).is_file():
                try:
                    if needle in Path(fields[5]).read_bytes():
                        return True
                except OSError:
                    pass
            try:
                mem.seek(start)
                if needle in mem.read(end - start):
                    return True
            except (OSError, OverflowError, ValueError):
                continue
    return False
