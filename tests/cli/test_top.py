"""``harness-run top``: the sessions of a local store and of a server after real ``claude`` turns
against the scripted model (``--once``: one table), bad options named with the fix, and the live view
in a pseudo-terminal quitting on ``q`` and on Ctrl-C."""

from __future__ import annotations

import contextlib
import fcntl
import os
import pty
import select
import subprocess
import sys
import termios
import time
from pathlib import Path

import pytest
from server._helpers import MODEL, ServerThread, cli

import harness_run
from harness_run import AgentSpec, local
from harness_run.testing import ScriptedModel, shell, text

pytestmark = pytest.mark.harness

WIDE = {"COLUMNS": "200"}


async def _one_turn(workdir: Path, model: ScriptedModel) -> str:
    model.add(shell("echo working"), text("done"))
    engine = local.deploy(AgentSpec(name="topped", harness="claude-code", model=MODEL), workdir=workdir)
    session = engine.start_session()
    result = await session.run("work", secrets={"ANTHROPIC_BASE_URL": model.url, "ANTHROPIC_API_KEY": "k"})
    assert not result.is_error and result.resources is not None
    await engine.aclose()
    return session.session_id


async def test_once_shows_the_local_sessions(tmp_path: Path, scripted_model: ScriptedModel) -> None:
    sid = await _one_turn(tmp_path, scripted_model)
    shown = cli("top", "--once", "--workdir", str(tmp_path), env=WIDE)
    assert shown.returncode == 0, shown.stderr
    [line] = [row for row in shown.stdout.splitlines() if sid in row]
    cells = [cell.strip() for cell in line.strip("│ ").split("│")]
    assert cells[:4] == ["topped", sid, "idle", "1"]
    assert float(cells[4]) > 0  # the turn's cost
    assert cells[5].endswith("s ago") and float(cells[6]) >= 0 and float(cells[7]) > 0  # cpu, peak MB
    assert "1 sessions, 0 running" in shown.stdout
    # the same through --store, filtered by engine
    assert sid in cli("top", "--once", "--store", str(tmp_path), "--engine", "topped", env=WIDE).stdout
    assert sid not in cli("top", "--once", "--store", str(tmp_path), "--engine", "other", env=WIDE).stdout


async def test_once_shows_a_servers_sessions(tmp_path: Path, scripted_model: ScriptedModel) -> None:
    scripted_model.add(text("served"))
    spec = AgentSpec(name="served", harness="claude-code", model=MODEL, model_base_url=scripted_model.url)
    with ServerThread(tmp_path, [spec]) as server:
        engine = harness_run.connect(server.url, api_key=server.key)
        session = engine.start_session()
        await session.run("hi", secrets={"ANTHROPIC_API_KEY": "k"})
        await engine.aclose()
        shown = cli("top", "--once", "--server", server.url, env={**WIDE, "HARNESS_RUN_API_KEY": server.key})
        refused = cli("top", "--once", "--server", server.url, env={"HARNESS_RUN_API_KEY": "hrk_0_wrong"})
    assert shown.returncode == 0, shown.stderr
    assert session.session_id in shown.stdout and "served" in shown.stdout
    assert refused.returncode == 2 and "refused the API key" in refused.stderr


def test_bad_options_name_the_fix(tmp_path: Path) -> None:
    missing = cli("top", "--once", "--store", str(tmp_path / "nowhere"))
    assert missing.returncode == 2 and "--store: no history store at" in missing.stderr
    no_key = cli("top", "--server", "http://127.0.0.1:9", env={"HARNESS_RUN_API_KEY": ""})
    assert no_key.returncode == 2 and "HARNESS_RUN_API_KEY" in no_key.stderr
    interval = cli("top", "--interval", "0", "--store", str(tmp_path))
    assert interval.returncode == 2 and "--interval must be a positive" in interval.stderr
    assert "Traceback" not in missing.stderr + no_key.stderr + interval.stderr


def _controlling_terminal() -> None:
    """In the child: a new session whose controlling terminal is the pty (so Ctrl-C is SIGINT)."""
    os.setsid()
    fcntl.ioctl(0, termios.TIOCSCTTY, 0)


def _live(workdir: Path, key: bytes) -> tuple[int, str]:
    """Start the live view in a pseudo-terminal, wait for its table, press ``key``; (exit code, screen)."""
    main, child = pty.openpty()
    proc = subprocess.Popen(
        [sys.executable, "-m", "harness_run", "top", "--workdir", str(workdir), "--interval", "0.2"],
        stdin=child,
        stdout=child,
        stderr=child,
        env={**os.environ, **WIDE, "TERM": "xterm"},
        preexec_fn=_controlling_terminal,
    )
    os.close(child)
    screen = b""
    try:
        deadline = time.monotonic() + 60
        while b"q or Ctrl-C quits" not in screen and time.monotonic() < deadline:
            if select.select([main], [], [], 0.5)[0]:
                screen += os.read(main, 65536)
        assert b"SESSION" in screen, screen.decode(errors="replace")
        os.write(main, key)
        deadline = time.monotonic() + 30
        while proc.poll() is None and time.monotonic() < deadline:  # keep reading: a full pty blocks it
            if select.select([main], [], [], 0.2)[0]:
                with contextlib.suppress(OSError):
                    screen += os.read(main, 65536)
        return proc.wait(1), screen.decode(errors="replace")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        os.close(main)


async def test_live_view_quits_on_q_and_on_ctrl_c(tmp_path: Path, scripted_model: ScriptedModel) -> None:
    sid = await _one_turn(tmp_path, scripted_model)
    code, screen = _live(tmp_path, b"q")
    assert code == 0 and sid in screen
    code, _ = _live(tmp_path, b"\x03")  # the terminal turns Ctrl-C into SIGINT
    assert code == 0
