"""Run by test_reattach.py in a separate Python process: one step of a session's life.

    python reattach_proc.py start|get_engine|deploy WORKDIR MODEL_URL [SESSION_ID] PROMPT

Prints one JSON line describing what this process saw, then exits.
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Any

from harness_run import AgentSpec, local

SPEC = AgentSpec(name="reattach", harness="claude-code", model="claude-sonnet-4-6", checkpoint=True)


async def main(mode: str, workdir: str, url: str, rest: list[str]) -> dict[str, Any]:
    secrets = {"ANTHROPIC_BASE_URL": url, "ANTHROPIC_API_KEY": "scripted-dummy-key"}
    if mode == "start":
        engine = local.deploy(SPEC, workdir=workdir)
        session = engine.start_session()
        result = await session.run(rest[0], secrets=secrets)
        return {"session_id": session.session_id, "result": result.model_dump(mode="json")}
    session_id, prompt = rest
    engine = (
        local.get_engine(SPEC.name, workdir=workdir)
        if mode == "get_engine"
        else local.deploy(SPEC, workdir=workdir)
    )
    session = engine.get_session(session_id)
    seen: dict[str, Any] = {
        "engine_version": engine.version,
        "status": session.status,
        "history": [t.model_dump(mode="json") for t in session.history()],
        "last_result": session.last_result.model_dump(mode="json") if session.last_result else None,
        "event_types": [e.type for e in session.events()],
    }
    result = await session.send(prompt, secrets=secrets)
    made = Path(workdir) / "sessions" / session_id / "workspace" / "made.txt"
    seen.update(
        result=result.model_dump(mode="json"),
        made=made.read_text() if made.exists() else None,
        turns_after=[t.turn for t in session.history()],
    )
    return seen


if __name__ == "__main__":
    out = asyncio.run(main(sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]))
    print(json.dumps(out))
