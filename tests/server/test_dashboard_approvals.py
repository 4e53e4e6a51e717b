"""The dashboard's approval cards in a real browser (Debian's chromium, Playwright) against a real
``harness-run serve`` and real Claude Code turns on the scripted model (issue 23).

A shell call the spec's ``approvals`` catch shows as a card with the command, who asked and when it
expires; the sessions list says "waiting for approval"; **Allow** lets the command run, **Deny** with
a reason keeps it from running and the reason comes back as the tool's error."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from harness_run import AgentSpec, ApprovalPolicy
from harness_run.testing import ScriptedModel, shell, text

from . import test_dashboard as dash
from ._helpers import MODEL, cli

browser = dash.browser  # the same fixtures as the dashboard's own tests
page = dash.page

pytestmark = pytest.mark.harness


@pytest.fixture
def served(tmp_path: Path, scripted_model: ScriptedModel) -> Iterator[dash.Served]:
    """A real ``harness-run serve`` of one Claude Code spec whose ``echo`` commands wait for a person."""
    spec = AgentSpec(
        name="dash", harness="claude-code", model=MODEL, approvals=ApprovalPolicy(commands=["echo *"])
    )
    spec_file = tmp_path / "agent.yaml"
    spec_file.write_text(spec.to_yaml())
    store = tmp_path / "store"
    made = cli("serve", "keys", "create", "--name", "browser", "--store", str(store))
    assert made.returncode == 0, made.stderr
    args = [sys.executable, "-m", "harness_run", "serve", "--store", str(store), "--port", "0"]
    env = {**os.environ, **scripted_model.env_for("claude-code")}
    proc = subprocess.Popen(
        [*args, "--spec", str(spec_file)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert "listening on" in line, proc.stderr.read() if proc.stderr else line
        yield dash.Served(url=line.split()[-1], key=made.stdout.split()[-1])
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=30)
        assert proc.returncode == 0, err


def test_allow_and_deny_from_the_card(
    page: dash.Page, served: dash.Served, scripted_model: ScriptedModel, request: pytest.FixtureRequest
) -> None:
    from playwright.sync_api import expect

    name = request.node.name
    allowed, refused = (f"marker-{uuid.uuid4().hex[:8]}" for _ in range(2))
    scripted_model.add(shell(f"echo {allowed}"), text("it ran"))
    scripted_model.add(shell(f"echo {refused}"), text("left it alone"))
    dash.sign_in(page, served)
    sid = dash.new_session(page)
    dash.send(page, "run the first one")

    card = page.locator("#events .approval").first
    expect(card.locator(".approval-command")).to_have_text(f"echo {allowed}")
    expect(card.locator(".approval-who")).to_contain_text("asked by dash · claude-code · key ")
    expect(card.locator(".approval-expires")).to_contain_text(re.compile(r"expires .* \(in \d+ s\)"))
    expect(page.locator("#session-status")).to_have_text("waiting for approval")
    dash.shot(page, name, "1-card")

    page.click("#session h1 a")  # the list says who waits
    row = page.locator(f'#session-rows tr[data-session-id="{sid}"]')
    expect(row.locator(".status")).to_have_text("waiting for approval")
    dash.shot(page, name, "2-list")
    row.locator("a").click()  # back in: the card is drawn again from the stream, still open

    card.locator("button.allow").click()
    expect(card).to_have_attribute("data-state", "allowed")
    expect(card.locator(".approval-outcome")).to_contain_text("Allowed (key ")
    expect(card.locator("button")).to_have_count(0)
    events = page.locator("#events")
    expect(events.locator(".line.result")).to_contain_text("completed")
    expect(events.locator("details.tool .tool-result").first).to_have_text(re.compile(allowed))
    expect(page.locator("#session-status")).to_have_text("idle")

    dash.send(page, "run the second one")
    second = page.locator("#events .approval").nth(1)
    expect(second.locator(".approval-command")).to_have_text(f"echo {refused}")
    second.locator("input.approval-reason").fill("not on a Friday")
    second.locator("button.deny").click()
    expect(second).to_have_attribute("data-state", "denied")
    expect(second.locator(".approval-outcome")).to_contain_text("Denied (key ")
    expect(second.locator(".approval-outcome")).to_contain_text("not on a Friday")
    expect(events.locator(".line.result")).to_have_count(2)
    expect(events.locator(".msg.assistant").nth(1)).to_contain_text("left it alone")
    assert any("not on a Friday" in r for r in scripted_model.requests[-1].tool_results)
    assert not any(refused in r for r in scripted_model.requests[-1].tool_results)
    dash.shot(page, name, "3-decided")
    dash.assert_safe(page)
