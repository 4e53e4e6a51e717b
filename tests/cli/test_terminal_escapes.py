"""Untrusted text never acts on the terminal: ``harness-run chat``, ``run`` and ``top`` in a
pseudo-terminal, the real ``claude`` against a scripted model whose answer and tool output carry an
OSC 52 clipboard write, a clear screen, an OSC 8 link with lying text and a C1 CSI (and a store
whose engine name carries them, plus rich markup). The raw bytes written to the terminal hold none
of those sequences, while the harmless rest of the text is still shown."""

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
import uuid
from pathlib import Path

import pytest

from harness_run.store import SessionRecord, SqliteStore
from harness_run.testing import ScriptedModel, shell, text

pytestmark = pytest.mark.harness

ATTACK = (
    "clip\x1b]52;c;ZXZpbA==\x07 wipe\x1b[2J "
    "see \x1b]8;;http://evil.example\x1b\\docs\x1b]8;;\x1b\\ csi\x9b31m red\x9d0;title\x9c bell\x07 done"
)
"""What the model answers: each escape sequence with visible words around it."""
TOOL = r"printf 'tool\033]52;c;dG9vbA==\007 out\033[2J put\n'"
SPEC = "name: escapes\nharness: claude-code\nmodel: claude-sonnet-4-6\n"


def assert_inert(screen: bytes, *shown: str) -> None:
    """No OSC (clipboard, link, title), clear screen, BEL or C1 control in ``screen``; ``shown``
    (the visible words of the attack) are there."""
    decoded = screen.decode(errors="replace")
    for sequence in ("\x1b]", "\x1b[2J", "\x07", "\x1bP", "\x1b_", "\x1b^"):
        assert sequence not in decoded, (sequence, decoded)
    assert not [c for c in decoded if 0x80 <= ord(c) < 0xA0], decoded
    for word in shown:
        assert word in decoded, (word, decoded)


def _controlling_terminal() -> None:
    os.setsid()
    fcntl.ioctl(0, termios.TIOCSCTTY, 0)


def _in_pty(args: list[str], env: dict[str, str], steps: list[tuple[bytes, bytes]]) -> bytes:
    """``harness-run ARGS`` on a pseudo-terminal: every byte it writes until it exits; at each step
    ``(until, then)``, once ``until`` has shown (since the last step), ``then`` is typed."""
    main, child = pty.openpty()
    termios.tcsetwinsize(child, (50, 220))
    proc = subprocess.Popen(
        [sys.executable, "-m", "harness_run", *args],
        stdin=child,
        stdout=child,
        stderr=child,
        env={**env, "TERM": "xterm", "COLUMNS": "220", "PROMPT_TOOLKIT_NO_CPR": "1"},
        preexec_fn=_controlling_terminal,
    )
    os.close(child)
    screen = b""

    def read(timeout: float) -> None:
        nonlocal screen
        if select.select([main], [], [], timeout)[0]:
            with contextlib.suppress(OSError):
                screen += os.read(main, 65536)

    try:
        seen = 0  # where the last step's text ended
        for until, then in steps:
            deadline = time.monotonic() + 90
            while until not in screen[seen:] and time.monotonic() < deadline:
                read(0.5)
            assert until in screen[seen:], screen.decode(errors="replace")
            seen = screen.index(until, seen) + len(until)
            os.write(main, then)
        deadline = time.monotonic() + 60
        while proc.poll() is None and time.monotonic() < deadline:  # keep reading: a full pty blocks it
            read(0.2)
        read(0.2)
        assert proc.wait(1) == 0, screen.decode(errors="replace")
        return screen
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        os.close(main)


def _env(model: ScriptedModel, tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ANTHROPIC_", "HARNESS_RUN_API_KEY"))}
    return {
        **env,
        "ANTHROPIC_BASE_URL": model.url,
        "ANTHROPIC_API_KEY": "scripted-escapes-key",
        "HARNESS_RUN_HOME": str(tmp_path / "home"),
    }


def test_chat_and_run_show_the_agents_escape_sequences_inert(
    tmp_path: Path, scripted_model: ScriptedModel
) -> None:
    spec = tmp_path / "agent.yaml"
    spec.write_text(SPEC)
    env = _env(scripted_model, tmp_path)
    scripted_model.add(shell(TOOL), text(ATTACK), shell(TOOL), text(ATTACK))

    # chat: the streamed answer (deltas), the folded tool output, the result line
    steps = [(b"chat>", b"show me\r"), (b"completed", b""), (b"chat>", b"/quit\r")]
    chat = _in_pty(["chat", str(spec), "--workdir", str(tmp_path / "w")], env, steps)
    assert_inert(chat, "clip]52;c;ZXZpbA== wipe[2J", "docs]8;;", "csi31m red", "done", "tool]52;c;dG9vbA==")

    # run: the live view of a turn on a terminal, and its result
    ran = _in_pty(["run", str(spec), "go", "--workdir", str(tmp_path / "w")], env, [])
    assert_inert(ran, "clip]52;c;ZXZpbA== wipe[2J", "csi31m red", "done", "tool]52;c;dG9vbA==")


def test_top_shows_a_stored_engine_name_inert(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path)
    now = time.time()
    for engine in (f"evil{ATTACK}", "[link=http://evil.example]markup[/link]"):
        record = SessionRecord(
            session_id=str(uuid.uuid4()),
            engine=engine,
            version="1",
            harness="claude-code",
            created_at=now,
            updated_at=now,
        )
        store.put_session(record)
    store.close()
    screen = _in_pty(
        ["top", "--workdir", str(tmp_path), "--interval", "0.2"], dict(os.environ), [(b"quits", b"q")]
    )
    assert_inert(screen, "evilclip]52;c;ZXZ", "[link=http://evil.example]markup[/link]")
