"""The web dashboard in Debian's chromium (Playwright): what the page adds to what the API gives.

1. open: navigation start to the sessions list drawn (the key already in the tab), fresh contexts;
2. a turn: the same scripted Claude Code turn (a shell tool call, then text) through the page
   (click Send -> the result line drawn) and through the API alone (POST .../turns with SSE, to the
   result event), alternating, after a warm-up: medians and their ratio; and click -> the prompt
   drawn (the turn's first event back through the page's stream);
3. history: navigation start to every turn of a session with N turns drawn (the replay).

In-page times come from ``performance.now()`` in MutationObservers, not from Playwright's polling.

    python -m benchmarks dashboard [--rounds N] [--opens N] [--history N]
"""

from __future__ import annotations

import argparse
import json
import os
import time
import urllib.request
from pathlib import Path
from typing import Any

from benchmarks._common import KEY, PROMPT, alternating, claude_spec, ratio, report, scratch, scripted_model
from benchmarks._services import make_key, start_server, stop_server

CHROMIUM = "/usr/bin/chromium"

# Marks in the page: when the sessions list first has rows, and when the n-th result line appeared.
MARKS = """
window.__marks = {list: null, results: []};
new MutationObserver(() => {
  const rows = document.getElementById("session-rows");
  if (window.__marks.list === null && rows && rows.children.length) window.__marks.list = performance.now();
  const events = document.getElementById("events");
  const n = events ? events.querySelectorAll(".line.result").length : 0;
  while (window.__marks.results.length < n) window.__marks.results.push(performance.now());
}).observe(document, {childList: true, subtree: true});
"""

# Click Send and time, in the page, the prompt drawn and the n-th result line drawn.
TURN = """
async (n) => {
  const events = document.getElementById("events");
  const count = (sel) => events.querySelectorAll(sel).length;
  let userAt = null;
  const t0 = performance.now();
  const done = new Promise((resolve) => {
    const watch = new MutationObserver(() => {
      if (userAt === null && count(".msg.user") >= n) userAt = performance.now();
      if (count(".line.result") >= n) { watch.disconnect(); resolve(performance.now()); }
    });
    watch.observe(events, {childList: true, subtree: true});
  });
  document.getElementById("send").click();
  const end = await done;
  return [userAt - t0, end - t0];
}
"""


def call(url: str, key: str, method: str = "GET", body: Any = None, sse: bool = False) -> Any:
    headers = {"Authorization": f"Bearer {key}", "Content-Type": "application/json"}
    if sse:
        headers["Accept"] = "text/event-stream"
    data = json.dumps(body).encode() if body is not None else None
    with urllib.request.urlopen(
        urllib.request.Request(url, data=data, method=method, headers=headers), timeout=120
    ) as answer:
        if not sse:
            return json.loads(answer.read())
        for raw in answer:
            line = raw.decode()
            if line.startswith("data: ") and json.loads(line[6:])["type"] == "result":
                return json.loads(line[6:])["result"]
    raise SystemExit("the stream ended without a result")


def api_turn(url: str, key: str, sid: str) -> float:
    start = time.perf_counter()
    result = call(f"{url}/v1/sessions/{sid}/turns", key, "POST", {"prompt": PROMPT}, sse=True)
    if result["is_error"]:
        raise SystemExit(f"turn failed: {result['error']}")
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--opens", type=int, default=5)
    parser.add_argument("--history", type=int, default=10)
    args = parser.parse_args()
    if not Path(CHROMIUM).exists():
        raise SystemExit(f"no {CHROMIUM}: install Debian's chromium (scripts/test does)")
    from playwright.sync_api import sync_playwright

    store = scratch("dash-store-")
    spec_file = store / "agent.yaml"
    spec_file.write_text(claude_spec().to_yaml())
    key = make_key(store)
    with scripted_model() as model_url:
        os.environ.update({"ANTHROPIC_BASE_URL": model_url, "ANTHROPIC_API_KEY": KEY})  # the server's
        proc, url, _ = start_server(store, spec_file)
        try:
            with sync_playwright() as playwright:
                browser = playwright.chromium.launch(
                    executable_path=CHROMIUM,
                    headless=True,
                    args=["--disable-background-networking", "--disable-component-update", "--no-first-run"],
                )
                try:
                    measure(browser, url, key, args)
                finally:
                    browser.close()
        finally:
            stop_server(proc)


def measure(browser: Any, url: str, key: str, args: argparse.Namespace) -> None:
    signed_in = f"sessionStorage.setItem('harness-run.api-key', {json.dumps(key)});"

    def open_page(path: str = "/") -> Any:
        # bypass_csp: Playwright's wait_for_function polls with eval(), which the page's CSP refuses
        context = browser.new_context(bypass_csp=True)
        context.add_init_script(signed_in + MARKS)
        page = context.new_page()
        page.goto(url + path)
        return context, page

    # 2. turns: through the page and through the API alone, alternating, after a warm-up
    api_sid = call(f"{url}/v1/engines/bench/sessions", key, "POST", {})["session_id"]
    context, page = open_page()
    page.wait_for_function(
        "window.__marks.list !== null || document.getElementById('no-sessions').offsetParent"
    )
    page_sid = call(f"{url}/v1/engines/bench/sessions", key, "POST", {})["session_id"]
    page.goto(f"{url}/#/s/{page_sid}")
    page.wait_for_function("document.getElementById('session-status').textContent === 'idle'")
    times: dict[str, list[float]] = {"page": [], "api": [], "prompt_drawn": []}
    page_turns = 0
    for way, measured in alternating(("page", "api"), args.rounds):
        if way == "api":
            took = api_turn(url, key, api_sid)
        else:
            page_turns += 1
            page.fill("#prompt", PROMPT)
            drawn_ms, took_ms = page.evaluate(TURN, page_turns)
            took = took_ms / 1000
            if measured:
                times["prompt_drawn"].append(drawn_ms)
        if measured:
            times[way].append(took)
    context.close()

    # 1. open: navigation start -> the sessions list drawn
    opens: list[float] = []
    for _ in range(args.opens):
        context, page = open_page()
        page.wait_for_function("window.__marks.list !== null")
        opens.append(page.evaluate("window.__marks.list"))
        context.close()

    # 3. history: a session with N turns, opened in a fresh tab
    sid = call(f"{url}/v1/engines/bench/sessions", key, "POST", {})["session_id"]
    for _ in range(args.history):
        api_turn(url, key, sid)
    replays: list[float] = []
    for _ in range(args.opens):
        context, page = open_page(f"/#/s/{sid}")
        page.wait_for_function(f"window.__marks.results.length >= {args.history}")
        replays.append(page.evaluate(f"window.__marks.results[{args.history - 1}]"))
        context.close()

    report("open: navigation to the sessions list drawn", opens, "ms")
    report("turn through the page (click -> result line)", times["page"])
    report("turn through the API (POST + SSE -> result)", times["api"])
    ratio("ratio page / API", times["page"], times["api"])
    report("click -> the prompt drawn from the stream", times["prompt_drawn"], "ms")
    report(f"history: navigation to {args.history} turns drawn", replays, "ms")


if __name__ == "__main__":
    main()
