"""The README example, runnable anywhere: a real Claude Code session of two turns.

With ANTHROPIC_API_KEY set it talks to Anthropic; without it, to harness-run's scripted model on
127.0.0.1 (no key, no network), so you can see the whole flow offline:

    python examples/quickstart.py
"""

from __future__ import annotations

import asyncio
import os
import tempfile

from harness_run import AgentSpec, local
from harness_run.testing import ScriptedModel, shell, text, write_file

FIB = "def fibonacci(n):\n    return n if n < 2 else fibonacci(n - 1) + fibonacci(n - 2)\n"
FIB_ITER = (
    "def fibonacci(n):\n    a, b = 0, 1\n    for _ in range(n):\n        a, b = b, a + b\n    return a\n"
)
TEST = (
    "from fib import fibonacci\n\n"
    "def test_fib():\n    assert [fibonacci(i) for i in range(7)] == [0, 1, 1, 2, 3, 5, 8]\n"
)
CHECK = "python3 -c 'from test_fib import test_fib; test_fib(); print(\"1 passed\")'"


async def main() -> None:
    spec = AgentSpec(name="code-agent", harness="claude-code", model="claude-sonnet-4-6", checkpoint=True)
    model = None
    secrets: dict[str, str] = {}
    if not os.environ.get("ANTHROPIC_API_KEY"):
        model = ScriptedModel(
            [
                write_file("fib.py", FIB),
                write_file("test_fib.py", TEST),
                shell(CHECK),
                text("fibonacci(n) is in fib.py with a test; it passes."),
                write_file("fib.py", FIB_ITER),
                shell(CHECK),
                text("Now iterative; the test still passes."),
            ]
        ).start()
        secrets = {"ANTHROPIC_BASE_URL": model.url, "ANTHROPIC_API_KEY": "scripted"}
    workdir = os.environ.get("HARNESS_RUN_HOME") or tempfile.mkdtemp(prefix="harness-run-quickstart-")
    try:
        engine = local.deploy(spec, workdir=workdir)
        session = engine.start_session()

        result = await session.run(
            "Create a Python function fibonacci(n), add a few tests, and run them.", secrets=secrets
        )
        print(result.text)
        print(result.cost_usd)

        result = await session.send(
            "Now make it iterative instead of recursive and run the tests again.", secrets=secrets
        )
        print(result.text)
        print(f"session {session.session_id}: {len(session.history())} turns, workdir {workdir}")
    finally:
        if model is not None:
            model.stop()


if __name__ == "__main__":
    asyncio.run(main())
