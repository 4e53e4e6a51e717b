"""The web dashboard in a real browser: Debian's chromium driven by Playwright, against a real
`harness-run serve` process and real Claude Code turns on the scripted model.

Sign in (a wrong key is refused), start a session, send a prompt and watch its tool call and answer
stream in, interrupt a long turn, reload and see the history; agent text with markup stays text.
Screenshots go to ``test-artifacts/dashboard/`` (``$HARNESS_RUN_TEST_ARTIFACTS``; git-ignored)."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from harness_run import AgentSpec
from harness_run.testing import ScriptedModel, error, shell, text

from ._helpers import MODEL, cli

if TYPE_CHECKING:
    from playwright.sync_api import Browser, Page

CHROMIUM = Path("/usr/bin/chromium")
ARTIFACTS = Path(
    os.environ.get("HARNESS_RUN_TEST_ARTIFACTS", Path(__file__).resolve().parents[2] / "test-artifacts")
)
PAYLOAD = '<img src=x onerror="window.__pwned=1"><script>window.__pwned=2</script><b>bold?</b>'

# Recorded in the page before any of its scripts run (Playwright injects this past the page's CSP).
_WATCH = """
window.__pwned = 0;
window.__csp = [];
document.addEventListener("securitypolicyviolation", (e) => {
  window.__csp.push(e.violatedDirective + " " + e.blockedURI);
});
"""


@dataclass
class Served:
    url: str
    key: str


@pytest.fixture
def served(tmp_path: Path, scripted_model: ScriptedModel) -> Iterator[Served]:
    """A real ``harness-run serve`` (subprocess, port 0) of one Claude Code spec on the scripted model."""
    spec_file = tmp_path / "agent.yaml"
    spec_file.write_text(AgentSpec(name="dash", harness="claude-code", model=MODEL).to_yaml())
    store = tmp_path / "store"
    made = cli("serve", "keys", "create", "--name", "browser", "--store", str(store))
    assert made.returncode == 0, made.stderr
    args = [
        sys.executable,
        "-m",
        "harness_run",
        "serve",
        "--store",
        str(store),
        "--port",
        "0",
        "--serve-recorded",
    ]
    env = {**os.environ, **scripted_model.env_for("claude-code")}  # the server's own model settings
    proc = subprocess.Popen(
        [*args, "--spec", str(spec_file)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert "listening on" in line, proc.stderr.read() if proc.stderr else line
        yield Served(url=line.split()[-1], key=made.stdout.split()[-1])
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=30)
        assert proc.returncode == 0, err


@pytest.fixture
def browser() -> Iterator[Browser]:
    """Headless Debian chromium (never a downloaded browser build), offline flags."""
    if not CHROMIUM.exists():
        pytest.skip("no /usr/bin/chromium: install Debian's chromium (scripts/test does, with apt-get)")
    try:
        from playwright.sync_api import expect, sync_playwright
    except ImportError:
        pytest.skip("playwright is not installed: scripts/bootstrap installs it with the test extra")
    expect.set_options(timeout=90_000)  # real CLI turns on a shared 2-core machine
    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(
            executable_path=str(CHROMIUM),
            headless=True,
            args=["--disable-background-networking", "--disable-component-update", "--no-first-run"],
        )
        try:
            yield chromium
        finally:
            chromium.close()


@pytest.fixture
def page(browser: Browser, served: Served, request: pytest.FixtureRequest) -> Iterator[Page]:
    """A fresh browser context (no stored key) on the dashboard; ``served`` outlives it."""
    context = browser.new_context(viewport={"width": 1280, "height": 860})
    context.add_init_script(_WATCH)
    opened = context.new_page()
    opened.set_default_timeout(90_000)
    errors: list[str] = []
    opened.on("pageerror", lambda exc: errors.append(str(exc)))
    try:
        yield opened
    finally:
        shot(opened, request.node.name, "last")
        context.close()
    assert not errors, f"uncaught errors in the page: {errors}"


def shot(page: Page, test: str, step: str) -> None:
    folder = ARTIFACTS / "dashboard"
    folder.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(folder / f"{test}-{step}.png"), full_page=True)


def sign_in(page: Page, served: Served) -> None:
    from playwright.sync_api import expect

    page.goto(served.url)
    expect(page.locator("#login")).to_be_visible()
    page.fill("#key", served.key)
    page.click("#login-form button")
    expect(page.locator("#sessions")).to_be_visible()


def new_session(page: Page) -> str:
    from playwright.sync_api import expect

    page.select_option("#engine", "dash")
    page.click("#new-session button")
    expect(page.locator("#session")).to_be_visible()
    return page.locator("#session-title").inner_text()


def send(page: Page, prompt: str) -> None:
    page.fill("#prompt", prompt)
    page.click("#send")


def assert_safe(page: Page) -> None:
    """Nothing from the agent became markup or ran, and the page broke no CSP rule of its own."""
    assert page.locator("#events img, #events script, #events b").count() == 0
    assert page.evaluate("window.__pwned") == 0
    assert page.evaluate("window.__csp") == []


@pytest.mark.harness
def test_sign_in_prompt_tool_call_stream_and_history_after_reload(
    page: Page, served: Served, scripted_model: ScriptedModel, request: pytest.FixtureRequest
) -> None:
    from playwright.sync_api import expect

    name = request.node.name
    marker = f"tool-output-{uuid.uuid4().hex[:8]}"
    scripted_model.add(shell(f"echo {marker}"), text("the answer is 42"), text("and the second answer"))

    page.goto(served.url)
    page.fill("#key", "hrk_0000_wrong")
    page.click("#login-form button")
    expect(page.locator("#login-error")).to_contain_text("401")
    expect(page.locator("#sessions")).to_be_hidden()
    assert page.evaluate("sessionStorage.length") == 0  # a refused key is not kept
    shot(page, name, "1-wrong-key")

    sign_in(page, served)
    expect(page.locator("#no-sessions")).to_be_visible()
    assert page.locator("#engine option").all_inner_texts() == ["dash"]
    sid = new_session(page)

    send(page, "what does the tool say?")
    events = page.locator("#events")
    expect(events.locator(".msg.user")).to_have_text(re.compile("what does the tool say"))
    tool = events.locator("details.tool")
    expect(tool.locator("summary")).to_contain_text("Bash")
    expect(tool.locator("summary")).to_contain_text(f"echo {marker}")
    expect(events.locator(".msg.assistant")).to_contain_text("the answer is 42")
    result = events.locator(".line.result")
    expect(result).to_contain_text("completed")
    expect(result).to_contain_text(re.compile(r"\$\d+\.\d{4} · \d+\.\d s"))  # cost and duration
    # the tool's output is folded into its call: hidden until the call is opened
    output = tool.locator(".tool-result")
    expect(output).to_have_text(re.compile(marker))
    expect(output).to_be_hidden()
    tool.locator("summary").click()
    expect(output).to_be_visible()
    expect(page.locator("#session-status")).to_have_text("idle")
    expect(page.locator("#session-meta")).to_contain_text("1 turn")
    shot(page, name, "2-first-turn")

    page.reload()  # the key stays in this tab; the history is replayed
    expect(page.locator("#session")).to_be_visible()
    expect(events.locator(".msg.user")).to_have_text(re.compile("what does the tool say"))
    expect(events.locator("details.tool .tool-result")).to_have_text(re.compile(marker))
    expect(events.locator(".msg.assistant")).to_have_text(re.compile("the answer is 42"))
    expect(result).to_have_count(1)

    send(page, "and again")  # the session goes on from the reloaded page
    expect(events.locator(".turn")).to_have_text(["Turn 1", "Turn 2"])
    expect(events.locator(".msg.assistant").nth(1)).to_have_text(re.compile("and the second answer"))
    expect(result).to_have_count(2)
    expect(page.locator("#session-meta")).to_contain_text("2 turns")
    shot(page, name, "3-after-reload")

    page.click("#session h1 a")  # back to the list: the session with its turns, status and cost
    row = page.locator(f'#session-rows tr[data-session-id="{sid}"]')
    expect(row).to_be_visible()
    cells = row.locator("td")
    expect(cells.nth(1)).to_have_text("dash")
    expect(cells.nth(3)).to_have_text("idle")
    expect(cells.nth(4)).to_have_text("2")
    expect(cells.nth(5)).to_have_text(re.compile(r"^\$\d+\.\d{4}$"))
    shot(page, name, "4-sessions")
    assert_safe(page)


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


def _eventually(check: Callable[[], object], within: float = 60.0) -> bool:
    """Whether ``check()`` turns true within ``within`` seconds (a wait, not a timing assertion)."""
    deadline = time.monotonic() + within
    while not check():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)
    return True


@pytest.mark.harness
def test_interrupt_a_long_turn(
    page: Page, served: Served, scripted_model: ScriptedModel, request: pytest.FixtureRequest
) -> None:
    from playwright.sync_api import expect

    marker = f"sleep 60.{uuid.uuid4().int % 10**6:06d}"
    scripted_model.add(shell(f"bash -c '{marker}; echo slept'"), text("back again"))
    sign_in(page, served)
    sid = new_session(page)
    send(page, "take your time")
    expect(page.locator("details.tool summary")).to_contain_text(marker)
    expect(page.locator("#session-status")).to_have_text("running")
    page.click("#session h1 a")  # the list shows the turn running; back in, the live turn goes on
    status = page.locator(f'#session-rows tr[data-session-id="{sid}"] .status')
    expect(status).to_have_text("running")
    page.click(f'#session-rows tr[data-session-id="{sid}"] a')
    expect(page.locator("details.tool summary")).to_contain_text(marker)
    expect(page.locator("#session-status")).to_have_text("running")
    expect(page.locator("#interrupt")).to_be_enabled()
    assert _eventually(lambda: _processes_with(marker)), "the tool command never started"
    send(page, "and another thing")  # one turn at a time: the server's 409 message is shown
    expect(page.locator("#notice")).to_contain_text("is still running turn 1")
    expect(page.locator("#prompt")).to_have_value("and another thing")  # kept for later
    shot(page, request.node.name, "1-running")

    page.click("#interrupt")
    result = page.locator("#events .line.result")
    expect(result).to_contain_text("interrupted")
    expect(page.locator("#session-status")).not_to_have_text("running")
    expect(page.locator("#interrupt")).to_be_disabled()
    assert _eventually(lambda: not _processes_with(marker)), "the interrupted turn left its tool running"
    expect(page.locator("#events .msg.assistant")).to_have_count(0)  # the turn ended without an answer
    shot(page, request.node.name, "2-interrupted")

    page.fill("#prompt", "")
    send(page, "carry on")  # the session takes the next turn
    expect(page.locator("#notice")).to_be_hidden()
    expect(page.locator("#events .msg.assistant")).to_contain_text("back again")
    expect(result).to_have_count(2)


@pytest.mark.harness
def test_agent_text_with_markup_is_shown_as_text_and_never_runs(
    page: Page, served: Served, scripted_model: ScriptedModel, request: pytest.FixtureRequest
) -> None:
    from playwright.sync_api import expect

    scripted_model.add(
        shell(f"echo '{PAYLOAD}'"), text(f"here it is: {PAYLOAD}"), error(400, f"refused {PAYLOAD}")
    )
    sign_in(page, served)
    new_session(page)
    send(page, f"show me {PAYLOAD}")
    events = page.locator("#events")
    expect(events.locator(".line.result")).to_be_visible()
    expect(events.locator(".msg.user .text")).to_have_text(f"show me {PAYLOAD}")
    expect(events.locator(".msg.assistant .text")).to_have_text(f"here it is: {PAYLOAD}")
    expect(events.locator("details.tool summary")).to_contain_text(PAYLOAD)
    expect(events.locator("details.tool .tool-result")).to_contain_text(PAYLOAD)
    assert_safe(page)
    send(page, "once more")  # the model refuses: the turn's error, with markup, is text too
    expect(events.locator(".line.result").nth(1)).to_contain_text("✗ error")
    expect(events.locator(".line.error").first).to_contain_text(f"refused {PAYLOAD}")
    expect(page.locator("#session-status")).to_have_text("failed")
    assert_safe(page)
    page.reload()  # the replayed history is drawn by the same code: still text
    expect(events.locator(".msg.assistant .text").first).to_have_text(f"here it is: {PAYLOAD}")
    expect(events.locator(".line.error").first).to_contain_text(f"refused {PAYLOAD}")
    assert_safe(page)
    shot(page, request.node.name, "1-markup-as-text")


# --- the routes themselves (no browser): the page is open, the data is not ---------------------------


def _get(url: str, headers: dict[str, str] | None = None) -> tuple[int, dict[str, str], bytes]:
    req = urllib.request.Request(url, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=30) as answer:
            return answer.status, dict(answer.headers), answer.read()
    except urllib.error.HTTPError as exc:
        return exc.code, dict(exc.headers), exc.read()


def test_page_is_served_with_a_strict_policy_and_the_data_needs_the_key(served: Served) -> None:
    origin = {"Origin": "http://evil.example"}
    status, headers, body = _get(served.url + "/", origin)
    assert status == 200 and headers["Content-Type"].startswith("text/html")
    policy = headers["Content-Security-Policy"]
    assert "default-src 'self'" in policy and "script-src 'self'" in policy and "unsafe" not in policy
    assert headers["X-Content-Type-Options"] == "nosniff"
    assert b"/static/dashboard.js" in body and b"<script>" not in body  # no inline script
    for path, kind in [("/static/dashboard.js", "text/javascript"), ("/static/dashboard.css", "text/css")]:
        status, headers, body = _get(served.url + path)
        assert status == 200 and headers["Content-Type"].startswith(kind) and body
    script = _get(served.url + "/static/dashboard.js")[2].decode()
    for sink in ("innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval("):
        assert sink not in script, f"the dashboard script uses {sink}"

    status, headers, body = _get(served.url + "/v1/sessions", origin)
    assert status == 401 and b"harness-run serve keys create" in body
    auth = {"Authorization": f"Bearer {served.key}", **origin}
    status, headers, _ = _get(served.url + "/v1/sessions", auth)
    assert status == 200
    assert not any(h.lower().startswith("access-control-") for h in headers)  # no CORS
    assert _get(served.url + "/healthz")[0] == 200
    status, _, body = _get(served.url + "/openapi.json")
    doc: dict[str, Any] = json.loads(body)
    assert status == 200 and "/" not in doc["paths"] and "/v1/sessions" in doc["paths"]
