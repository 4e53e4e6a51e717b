"""``harness-run chat`` asking the user inline (issue 23): a shell call the spec's ``approvals``
catch shows the command and ``allow? [y/N/reason]``; ``y`` lets it run, a typed reason denies it
and the model reads the reason. Through a pseudo-terminal, the real ``claude`` CLI against the
scripted model."""

from __future__ import annotations

import uuid
from pathlib import Path

import pexpect
import pytest

from harness_run.testing import ScriptedModel, shell, text

from .test_chat import PROMPT, _env, _spawn, chat_in_pty

pytestmark = pytest.mark.harness

SPEC = """\
name: careful-chat
harness: claude-code
model: claude-sonnet-4-6
approvals:
  commands: ["echo *"]
  timeout_s: 120
"""
__all__ = ["chat_in_pty"]  # the pty fixture, shared with the chat tests


def test_chat_asks_before_a_command_and_takes_y_or_a_reason(
    tmp_path: Path, chat_in_pty: list[pexpect.spawn], scripted_model: ScriptedModel
) -> None:
    allowed, refused = (f"marker-{uuid.uuid4().hex[:8]}" for _ in range(2))
    scripted_model.add(shell(f"echo {allowed}"), text("it ran"))
    scripted_model.add(shell(f"echo {refused}"), text("left it alone"))
    spec_file = tmp_path / "agent.yaml"
    spec_file.write_text(SPEC)
    args = [str(spec_file), "--workdir", str(tmp_path / "work")]
    chat = _spawn(chat_in_pty, args, _env(scripted_model))
    chat.expect_exact(PROMPT)

    chat.sendline("run the first one")
    chat.expect_exact(f"? Bash wants to run: echo {allowed}")
    chat.expect_exact("allow? [y/N/reason]")
    chat.sendline("y")
    chat.expect_exact("allowed (by a client)")
    chat.expect_exact(f"⎿ {allowed}")
    chat.expect_exact("it ran")
    chat.expect(r"─ completed")
    chat.expect_exact(PROMPT)

    chat.sendline("run the second one")
    chat.expect_exact(f"? Bash wants to run: echo {refused}")
    chat.expect_exact("allow? [y/N/reason]")
    chat.sendline("not on a Friday")
    chat.expect_exact("denied (by a client): not on a Friday")
    chat.expect_exact("left it alone")
    chat.expect(r"─ completed")
    chat.expect_exact(PROMPT)
    assert any("not on a Friday" in r for r in scripted_model.requests[-1].tool_results)
    assert not any(refused in r for r in scripted_model.requests[-1].tool_results)
    chat.sendline("/quit")
    chat.expect(pexpect.EOF)
