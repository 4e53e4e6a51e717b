"""Run by test_harnesses.py in a separate Python process (another client of a session).

python approvals_proc.py decide WORKDIR ENGINE SESSION_ID allow|deny
    re-attach, wait for a pending request, decide it, print its id.
python approvals_proc.py turn WORKDIR HARNESS MODEL BASE_URL COMMAND
    run a turn whose command waits for approval (printing the session id, then each request id);
    the test kills this process while it waits.
"""

from __future__ import annotations

import asyncio
import sys
import time

from harness_run import AgentSpec, ApprovalPolicy, local


async def decide(workdir: str, engine: str, session_id: str, decision: str) -> None:
    session = local.get_engine(engine, workdir=workdir).get_session(session_id)
    deadline = time.monotonic() + 60
    while not (pending := session.pending_approvals()):
        if time.monotonic() > deadline:
            raise SystemExit("no request came")
        await asyncio.sleep(0.05)
    rid = pending[0].request_id
    if decision == "allow":
        await session.approve(rid, key_id="other-process")
    else:
        await session.deny(rid, reason="denied from another process", key_id="other-process")
    print(rid, flush=True)


async def turn(workdir: str, harness: str, model: str, url: str, command: str) -> None:
    spec = AgentSpec(
        name="careful",
        harness=harness,
        model=model,
        approvals=ApprovalPolicy(commands=["touch *"], timeout_s=120),
    )  # type: ignore[arg-type]
    session = local.deploy(spec, workdir=workdir).start_session()
    print(session.session_id, flush=True)
    key = "ANTHROPIC" if harness == "claude-code" else "OPENAI"
    secrets = {f"{key}_BASE_URL": url, f"{key}_API_KEY": "scripted-dummy-key"}
    run = session.run(f"run {command}", secrets=secrets)
    async for event in run:
        if event.type == "approval_request":
            print(event.request_id, flush=True)


if __name__ == "__main__":
    mode, *args = sys.argv[1:]
    asyncio.run(decide(*args) if mode == "decide" else turn(*args))
