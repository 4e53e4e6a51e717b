"""Run by test_container_isolation.py in a separate Python process: a client of a container-isolated
session that the test SIGKILLs mid-turn.

    python ctr_proc.py WORKDIR SESSION_ID MODEL_URL PROMPT

Re-attaches to the engine deployed in WORKDIR (Docker from the environment), sends PROMPT and
prints ``running`` once the turn's first tool call has started.
"""

from __future__ import annotations

import asyncio
import sys

import docker

from harness_run import local


async def main(workdir: str, sid: str, url: str, prompt: str) -> None:
    engine = local.get_engine("ctr", workdir=workdir, docker_client=docker.from_env())
    session = engine.get_session(sid)
    run = session.send(prompt, secrets={"ANTHROPIC_BASE_URL": url, "ANTHROPIC_API_KEY": "scripted-dummy-key"})
    async for event in run:
        if event.type == "tool_use":
            print("running", flush=True)
    await run


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:5]))
