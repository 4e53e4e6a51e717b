"""A second client process for the sandbox tests.

python attach_proc.py attach STORE_URL KUBECONFIG SESSION_ID
    print "ready" once the engine is made, then, on a line on stdin, re-attach to the session's
    running turn; print its events' types and result as JSON
python attach_proc.py start STORE_URL KUBECONFIG SESSION_ID MODEL_URL PROMPT
    start a turn, print "running" once its first tool call arrived, then wait (to be killed)
"""

from __future__ import annotations

import asyncio
import json
import os
import sys


def _engine(store_url: str, kubeconfig: str):  # type: ignore[no-untyped-def]
    os.environ["KUBECONFIG"] = kubeconfig
    from harness_run import sandbox

    # the cluster by name, as application code names it: its context comes from KUBECONFIG
    return sandbox.get_engine(
        "sbx", project="test-project", location="us-central1", cluster="hr-test", store=store_url
    )


async def attach(store_url: str, kubeconfig: str, session_id: str) -> None:
    engine = _engine(store_url, kubeconfig)
    print("ready", flush=True)  # imports and engine take seconds on a loaded machine: not on cue
    await asyncio.to_thread(sys.stdin.readline)
    session = engine.get_session(session_id)
    run = session.current_run
    if run is None:
        raise SystemExit(f"session {session_id} has no running turn (status {session.status})")
    result = await run
    out = {
        "turn": run.turn,
        "text": result.text,
        "is_error": result.is_error,
        "types": [e.type for e in run.events],
        "turns": session.record.turns,
    }
    print(json.dumps(out), flush=True)
    await engine.aclose()


async def start(store_url: str, kubeconfig: str, session_id: str, model_url: str, prompt: str) -> None:
    engine = _engine(store_url, kubeconfig)
    session = engine.get_session(session_id)
    secrets = {"ANTHROPIC_BASE_URL": model_url, "ANTHROPIC_API_KEY": "scripted-dummy-key"}
    run = session.run(prompt, secrets=secrets)
    async for event in run:
        if event.type == "tool_use":
            print("running", flush=True)
            break
    await asyncio.sleep(3600)


if __name__ == "__main__":
    mode, *args = sys.argv[1:]
    asyncio.run(attach(*args[:3]) if mode == "attach" else start(*args[:5]))
