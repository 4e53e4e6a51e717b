"""Run by test_agent_isolation.py as the "server" process: hardened as ``harness-run serve`` is
(non-dumpable, a private store) with the operator's model key and a canary in its own environment,
and one LocalEngine whose agents run as a uid per session (``AgentUids``), guards off.

    python agent_isolation_proc.py WORKDIR FIRST_UID

Environment: ``ANTHROPIC_API_KEY`` (the operator's key), ``MODEL_URL``, ``OTHER_CANARY`` (what the
other session writes into its workspace). Prints one JSON line once the other session exists, waits
for a line on stdin (the test scripts the attacks), runs the attacking session and prints one JSON
line with what it saw.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path
from typing import Any

from harness_run import AgentSpec, SecurityPolicy, SessionConfig
from harness_run.runtime.local import AgentUids, LocalEngine
from harness_run.server._hardening import make_undumpable, private_store
from harness_run.store import SqliteStore

GUARDS_OFF = SessionConfig(security_policy=SecurityPolicy(include_credential_guards=False))


def _say(data: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(data) + "\n")
    sys.stdout.flush()


async def main(workdir: Path, first: int) -> None:
    undumpable = make_undumpable()
    store = SqliteStore(workdir)
    (workdir / "history.sqlite3").chmod(0o644)  # a store an older version (or an operator) opened up
    (workdir / "blobs").chmod(0o755)
    tightened = sorted(str(p.relative_to(workdir)) for p in private_store(workdir))
    spec = AgentSpec(
        name="iso",
        harness="claude-code",
        model="claude-sonnet-4-6",
        env={"CLAUDE_CODE_MAX_RETRIES": "0"},
        checkpoint=True,
    )
    engine = LocalEngine(spec, workdir=workdir, store=store, agent_user=AgentUids(first, first + 99))
    secrets = {
        "ANTHROPIC_BASE_URL": os.environ["MODEL_URL"],
        "ANTHROPIC_API_KEY": os.environ["ANTHROPIC_API_KEY"],
    }
    try:
        other = engine.start_session(config=GUARDS_OFF)
        wrote = await other.exec(f"echo {os.environ['OTHER_CANARY']} > other.txt; id -u")
        _say({"other": other.session_id, "other_uid": wrote.stdout.strip(), "tightened": tightened})
        sys.stdin.readline()
        session = engine.start_session(config=GUARDS_OFF)
        attacked = await session.run("attack the server", secrets=secrets)
        again = await session.run("read your work back", secrets=secrets)
        done = await session.exec("id -u; id -g; stat -c %u made.txt; cat made.txt")
        record = store.get_session(session.session_id)
        assert record is not None
        _say(
            {
                "session": session.session_id,
                "undumpable": undumpable,
                "attacked": attacked.error if attacked.is_error else None,
                "again": again.error if again.is_error else None,
                "exec": done.stdout.split("\n"),
                "turns": record.turns,
                "snapshot": record.snapshot is not None,
            }
        )
    finally:
        await engine.aclose()
        store.close()


if __name__ == "__main__":
    asyncio.run(main(Path(sys.argv[1]), int(sys.argv[2])))
