"""Run by test_exclusive_turns.py in a separate Python process: one client of a local session.

    python turns_proc.py start WORKDIR HARNESS MODEL_URL SESSION_ID PROMPT
    python turns_proc.py send  WORKDIR HARNESS MODEL_URL SESSION_ID PROMPT [GO_FILE]

``start`` deploys the engine, starts the session with that id and runs a turn (the test kills it
mid-turn). ``send`` re-attaches, waits for GO_FILE when given (so that racing processes send
together), sends the prompt and prints one JSON line: what the history looked like before, and the
outcome (``ran`` with the result, or ``busy`` with the SessionBusyError message).
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from typing import Any

from harness_run import AgentSpec, local
from harness_run.errors import SessionBusyError

MODELS = {"claude-code": "claude-sonnet-4-6", "codex": "gpt-5.6-luna", "opencode": "openai/gpt-5.1"}


def secrets(harness: str, url: str) -> dict[str, str]:
    if harness == "claude-code":
        return {"ANTHROPIC_BASE_URL": url, "ANTHROPIC_API_KEY": "scripted-dummy-key"}
    return {"OPENAI_BASE_URL": f"{url}/v1", "OPENAI_API_KEY": "scripted-dummy-key"}


def wait_for_file(path: str) -> None:
    while not os.path.exists(path):
        time.sleep(0.002)


async def main(
    mode: str, workdir: str, harness: str, url: str, sid: str, prompt: str, rest: list[str]
) -> Any:
    engine = local.deploy(AgentSpec(name="rt", harness=harness, model=MODELS[harness]), workdir=workdir)  # type: ignore[arg-type]
    if mode == "start":
        session = engine.start_session(session_id=sid)
        print(json.dumps({"started": sid}), flush=True)
        return (await session.run(prompt, secrets=secrets(harness, url))).model_dump(mode="json")
    session = engine.get_session(sid)
    seen: dict[str, Any] = {
        "status": session.status,
        "turns": session.record.turns,
        "history": [
            {"turn": t.turn, "prompt": t.prompt, "stop_reason": t.result.stop_reason if t.result else None}
            for t in session.history()
        ],
        "events": [[e.turn, e.type] for e in session.events()],
    }
    if rest:
        print(json.dumps({"ready": os.getpid()}), flush=True)
        wait_for_file(rest[0])
    try:
        result = await session.send(prompt, secrets=secrets(harness, url))
    except SessionBusyError as exc:
        return {**seen, "outcome": "busy", "error": str(exc)}
    return {**seen, "outcome": "ran", "result": result.model_dump(mode="json")}


if __name__ == "__main__":
    mode, workdir, harness, url, sid, prompt, *rest = sys.argv[1:]
    out = asyncio.run(main(mode, workdir, harness, url, sid, prompt, rest))
    print(json.dumps(out), flush=True)
