"""A model that keeps failing: how long each harness holds the turn before it ends as an error.

For each harness and failure (a persistent HTTP 500, a stream cut mid-answer), one turn through
``session.run`` with harness-run's default retry settings (the spec's ``env`` can change them), and,
with ``--cli-defaults``, with the CLI's own defaults for comparison. Prints the wall time, the
number of model requests and the start of the result's error.

    python -m benchmarks failing_model [--harness NAME ...] [--failure 500|drop ...] [--cli-defaults]
"""

from __future__ import annotations

import argparse
import asyncio
import time

from benchmarks._common import local_engine, model_secrets
from harness_run import AgentSpec
from harness_run.testing import ScriptedModel, drop, error, text

MODELS = {"claude-code": "claude-sonnet-4-6", "codex": "gpt-5.1", "opencode": "openai/gpt-5.1"}
# each CLI's own retry defaults, set explicitly (harness-run's defaults apply when nothing is set)
CLI_DEFAULTS = {
    "claude-code": {"CLAUDE_CODE_MAX_RETRIES": "10"},
    "codex": {"HARNESS_RUN_CODEX_MAX_RETRIES": "5"},
}


async def one(harness: str, failure: str, env: dict[str, str]) -> tuple[float, int, str]:
    reply = error(500, "upstream failed: bench 500") if failure == "500" else drop()
    with ScriptedModel([reply, text("not reached")]) as model:
        spec = AgentSpec(name="bench", harness=harness, model=MODELS[harness], env=env, timeout=600)  # type: ignore[arg-type]
        engine = local_engine(spec)
        try:
            start = time.perf_counter()
            result = await engine.start_session().run("hello", secrets=model_secrets(model.url, harness))
            elapsed = time.perf_counter() - start
        finally:
            engine.close()
        assert result.is_error, "the failing model's turn did not fail"
        requests = len([r for r in model.requests if r.is_model_request])
        return elapsed, requests, (result.error or "")[:110]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--harness", action="append", choices=list(MODELS), help="default: all")
    parser.add_argument("--failure", action="append", choices=["500", "drop"], help="default: both")
    parser.add_argument("--cli-defaults", action="store_true", help="also run with the CLIs' own retries")
    args = parser.parse_args()
    settings = [("harness-run defaults", False)] + ([("CLI defaults", True)] if args.cli_defaults else [])
    for harness in args.harness or list(MODELS):
        for failure in args.failure or ["500", "drop"]:
            for label, cli in settings:
                if cli and harness not in CLI_DEFAULTS:
                    continue  # OpenCode has no retry setting: its defaults are the only ones
                env = CLI_DEFAULTS[harness] if cli else {}
                wall, requests, message = asyncio.run(one(harness, failure, env))
                print(
                    f"[{harness}] {failure}, {label}: {wall:.1f} s, {requests} model requests, error: {message!r}"
                )


if __name__ == "__main__":
    main()
