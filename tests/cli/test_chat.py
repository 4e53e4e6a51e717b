"""``harness-run chat`` through a pseudo-terminal (pexpect), with the real ``claude`` CLI against the
scripted model: the streamed answer, a folded tool call, slash commands, prompt history (up-arrow),
Ctrl-C interrupting a long turn and twice quitting; from a pipe against a real ``harness-run serve``;
bad arguments exit 2 naming the fix."""

from __future__ import annotations

import os
import re
import signal
import stat
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pexpect
import pytest

from harness_run.testing import ScriptedModel, shell, text

pytestmark = pytest.mark.harness

LONG = "Streaming works: " + " ".join(f"word{i}" for i in range(30)) + "."
SPEC = "name: chatty\nharness: claude-code\nmodel: claude-sonnet-4-6\n"
PROMPT = "chat>"  # prompt_toolkit draws the space after it as a cursor move


@pytest.fixture
def spec_file(tmp_path: Path) -> Path:
    path = tmp_path / "agent.yaml"
    path.write_text(SPEC)
    return path


def _env(model: ScriptedModel, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ANTHROPIC_", "HARNESS_RUN_API_KEY"))}
    env["PROMPT_TOOLKIT_NO_CPR"] = "1"  # pexpect does not answer cursor position requests
    return {**env, "ANTHROPIC_BASE_URL": model.url, "ANTHROPIC_API_KEY": "scripted-chat-key", **extra}


@pytest.fixture
def chat_in_pty(tmp_path: Path) -> Iterator[list[pexpect.spawn]]:
    spawned: list[pexpect.spawn] = []
    yield spawned
    for child in spawned:
        if child.isalive():
            child.kill(signal.SIGKILL)
        child.close()


def _spawn(spawned: list[pexpect.spawn], args: list[str], env: dict[str, str]) -> pexpect.spawn:
    child = pexpect.spawn(
        sys.executable,
        ["-m", "harness_run", "chat", *args],
        env=env,
        encoding="utf-8",
        timeout=90,
        dimensions=(50, 220),
    )
    spawned.append(child)
    return child


def _long_command() -> tuple[str, str]:
    marker = f"sleep 30.{uuid.uuid4().int % 10**6:06d}"
    return marker, f"bash -c '{marker}; echo finished'"


def test_chat_on_a_terminal(
    tmp_path: Path, spec_file: Path, chat_in_pty: list[pexpect.spawn], scripted_model: ScriptedModel
) -> None:
    marker, command = _long_command()
    scripted_model.add(shell("echo hi from the tool"), text(LONG), shell(command))  # interrupted there
    scripted_model.add(text("on the new session"))
    workdir = tmp_path / "work"
    chat = _spawn(chat_in_pty, [str(spec_file), "--workdir", str(workdir)], _env(scripted_model))
    chat.expect(r"session ([0-9a-f-]{36})")
    first_session = chat.match.group(1)
    chat.expect_exact(PROMPT)

    chat.sendline("say something")
    chat.expect_exact("⏺ Bash(echo hi from the tool)")  # the tool call, folded to one line
    chat.expect_exact("⎿ hi from the tool")
    chat.expect(r"─ completed · 2 model calls")
    answer = chat.before
    assert answer.count("word29.") == 1  # streamed once: the whole message did not print it again
    assert re.sub(r"\s+", " ", answer).count(LONG) == 1
    chat.expect_exact(PROMPT)

    chat.sendline("/cost")
    chat.expect(rf"session {first_session}: 1 turns, cost \$0\.000\d+, tokens in \d+, out \d+")
    chat.sendline("/exec echo hi from exec")
    chat.expect_exact("hi from exec")
    chat.expect_exact("─ exit 0")
    chat.expect_exact(PROMPT)
    chat.send("\x1b[A")  # up-arrow: the previous line comes back from the history
    chat.expect_exact("/exec echo hi from exec")
    chat.send("\r")
    chat.expect_exact("─ exit 0")
    chat.expect_exact(PROMPT)

    chat.sendline("now run the long one")  # Ctrl-C interrupts it; the prompt comes back
    chat.expect_exact(f"⏺ Bash({command})")
    chat.sendintr()
    chat.expect_exact("interrupting")
    chat.expect(r"─ interrupted")
    chat.expect_exact(PROMPT)
    assert not _processes_with(marker)

    chat.sendline("/sessions")
    chat.expect(rf"\* {first_session}\s+idle\s+2 turns")
    chat.sendline("/new")
    chat.expect(r"new session ([0-9a-f-]{36})")
    second_session = chat.match.group(1)
    chat.sendline("hello new session")
    chat.expect_exact("on the new session")
    chat.expect_exact(PROMPT)
    chat.sendline(f"/resume {first_session[:8]}")
    chat.expect_exact(f"resumed session {first_session} (2 turns)")
    chat.sendline("/cost")
    chat.expect(rf"session {first_session}: 2 turns")
    chat.sendline("/sessions")
    chat.expect_exact(second_session)
    chat.sendline("/help")
    chat.expect_exact("/interrupt")
    chat.sendline("/quit")
    chat.expect(pexpect.EOF)
    chat.close()
    assert chat.exitstatus == 0

    history = workdir / "chat_history"
    assert stat.S_IMODE(history.stat().st_mode) == 0o600
    assert "say something" in history.read_text() and "/exec echo hi from exec" in history.read_text()


def test_chat_resumes_a_session_and_two_ctrl_c_quit(
    tmp_path: Path, spec_file: Path, chat_in_pty: list[pexpect.spawn], scripted_model: ScriptedModel
) -> None:
    workdir = tmp_path / "work"
    scripted_model.add(text("remember me"))
    env = _env(scripted_model)
    made = subprocess.run(
        [sys.executable, "-m", "harness_run", "run", str(spec_file), "hi", "--workdir", str(workdir)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert made.returncode == 0, made.stderr
    session_id = re.findall(r"--session ([0-9a-f-]{36})", made.stdout)[-1]

    marker, command = _long_command()
    scripted_model.add(shell(command))
    chat = _spawn(chat_in_pty, ["--session", session_id, "--workdir", str(workdir)], env)
    chat.expect_exact(f"session {session_id}")
    chat.expect_exact(PROMPT)
    chat.sendline("/cost")
    chat.expect(rf"session {session_id}: 1 turns")
    chat.sendline("a long turn")
    chat.expect_exact(f"⏺ Bash({command})")
    chat.sendintr()
    chat.expect_exact("interrupting")
    chat.sendintr()  # within 2 s: quit (the turn is stopped and stored on the way out)
    chat.expect(pexpect.EOF)
    chat.close()
    assert chat.exitstatus == 130
    assert not _processes_with(marker)

    other_marker, other_command = _long_command()
    scripted_model.add(shell(other_command))
    again = _spawn(chat_in_pty, ["--session", session_id, "--workdir", str(workdir)], env)
    again.expect_exact(PROMPT)
    again.sendline("/cost")
    again.expect(rf"session {session_id}: 2 turns")  # the interrupted turn was stored
    again.sendline("another long turn")
    again.expect_exact(f"⏺ Bash({other_command})")
    again.sendline("/interrupt")  # typed while the turn runs: acts at once
    again.expect(r"─ interrupted")
    again.expect_exact(PROMPT)
    assert not _processes_with(other_marker)
    again.sendintr()  # at the idle prompt: quit
    again.expect(pexpect.EOF)
    again.close()
    assert again.exitstatus == 130


def test_chat_through_a_server_from_a_pipe(
    tmp_path: Path, spec_file: Path, scripted_model: ScriptedModel
) -> None:
    scripted_model.add(shell("echo served"), text(LONG), text("second answer"))
    store = tmp_path / "store"
    env = _env(scripted_model)
    made = _cli(["serve", "keys", "create", "--name", "chat", "--scope", "exec", "--store", str(store)], env)
    key = made.stdout.split()[-1]
    server = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "harness_run",
            "serve",
            "--store",
            str(store),
            "--port",
            "0",
            "--spec",
            str(spec_file),
            "--allow-exec",  # /exec runs on this host: the operator allows it
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        assert server.stdout is not None
        line = server.stdout.readline()
        assert "listening on" in line, line
        url = line.split()[-1]
        client_env = {k: v for k, v in env.items() if not k.startswith("ANTHROPIC_")}  # the server's own
        done = subprocess.run(
            [sys.executable, "-m", "harness_run", "chat", "--server", url, "--workdir", str(tmp_path / "c")],
            input="first question\nsecond question\n/cost\n/sessions\n/exec echo from the server\n/quit\n",
            env={**client_env, "HARNESS_RUN_API_KEY": key},
            capture_output=True,
            text=True,
            timeout=180,
            check=False,
        )
    finally:
        server.send_signal(signal.SIGTERM)
        server.communicate(timeout=30)
    out = done.stdout
    assert done.returncode == 0, done.stderr + out
    assert f"on {url}" in out
    assert "⏺ Bash(echo served)" in out and "⎿ served" in out
    assert re.sub(r"\s+", " ", out).count(LONG) == 1
    assert "second answer" in out
    assert re.search(r"session [0-9a-f-]{36}: 2 turns, cost \$0\.000\d+", out), out
    assert "from the server" in out and "─ exit 0" in out


def _cli(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "harness_run", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ([], "give a SPEC file, --session ID or --server URL"),
        (["agent.yaml", "--server", "http://127.0.0.1:9"], "not both"),
        (["missing.yaml"], "spec file 'missing.yaml' not found"),
        (["--api-key", "k", "agent.yaml"], "--api-key and --engine go with --server URL"),
        (["--session", "no-such-session"], "no session 'no-such-session'"),
        (["--server", "http://127.0.0.1:9"], "needs an API key"),
    ],
)
def test_bad_arguments_exit_2_naming_the_fix(
    tmp_path: Path, spec_file: Path, args: list[str], message: str
) -> None:
    env = {k: v for k, v in os.environ.items() if k != "HARNESS_RUN_API_KEY"}
    done = subprocess.run(
        [sys.executable, "-m", "harness_run", "chat", *args, "--workdir", str(tmp_path / "w")],
        cwd=spec_file.parent,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2, done.stdout + done.stderr
    assert message in done.stderr and "Traceback" not in done.stderr


def _processes_with(marker: str) -> list[int]:
    found: list[int] = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if marker.encode() in (entry / "cmdline").read_bytes():
                    found.append(int(entry.name))
            except OSError:
                continue
    return found


def test_run_on_a_terminal_streams_the_answer_once(
    tmp_path: Path, spec_file: Path, scripted_model: ScriptedModel
) -> None:
    """`harness-run run`'s terminal view writes the answer as its deltas arrive, after the label."""
    scripted_model.add(text(LONG))
    child = pexpect.spawn(
        sys.executable,
        ["-m", "harness_run", "run", str(spec_file), "hi", "--workdir", str(tmp_path / "w")],
        env=_env(scripted_model),
        encoding="utf-8",
        timeout=90,
        dimensions=(50, 80),
    )
    try:
        child.expect(pexpect.EOF)
    finally:
        child.close()
    out = re.sub(r"\x1b\[[0-9;]*m", "", child.before)
    assert child.exitstatus == 0, out
    # written as it streamed: one unbroken line (rich would have wrapped a whole message at 80 columns)
    assert out.count(f"agent {LONG}\r\n") == 1
    assert out.count("word29.") == 2  # the streamed answer, and the result's text under the rule
