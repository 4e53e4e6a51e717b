"""``harness-run run`` and ``harness-run demo``: one agent turn with a live event view."""

from __future__ import annotations

import argparse
import gc
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from harness_run.cli._options import add_workdir, secrets_from_env, settle_memory
from harness_run.errors import UsageError

if TYPE_CHECKING:
    from harness_run.cli._prespawn import Early

__all__ = ["register"]

_DEMO_PROMPT = "Create fib.py with a fibonacci(n) function, then run it to print fibonacci(10)."
_DEMO_CODE = (
    "def fibonacci(n: int) -> int:\n    a, b = 0, 1\n    for _ in range(n):\n        a, b = b, a + b\n"
    "    return a\n\n\nif __name__ == '__main__':\n    print(fibonacci(10))\n"
)


def register(sub: Any) -> None:
    run = sub.add_parser(
        "run",
        help="run one agent turn locally (or continue a session)",
        description="Run a turn of the agent in SPEC on this machine. Secrets are read from "
        "this process's environment by name (--secret NAME), never from the command line.",
    )
    run.add_argument("spec", help="spec file (YAML or JSON)")
    run.add_argument("prompt", help="what the agent should do")
    run.add_argument("--session", metavar="ID", help="continue this session (see `harness-run sessions`)")
    run.add_argument(
        "--secret",
        action="append",
        default=[],
        metavar="NAME",
        help="pass the environment variable NAME as a secret (repeatable)",
    )
    run.add_argument("--model", help="override the model for this turn")
    run.add_argument("--json", action="store_true", help="print events as JSON lines")
    add_workdir(run)
    run.set_defaults(func=_run, fast_exit=True, spawn_first=False)  # main(): True from the console

    demo = sub.add_parser(
        "demo",
        help="see a real Claude Code turn against the built-in scripted model",
        description="Runs the real `claude` CLI on a small task. With no ANTHROPIC_API_KEY "
        "in the environment (or with --scripted) the model is harness-run's scripted model "
        "on 127.0.0.1, so it needs no key and no network.",
    )
    demo.add_argument("--scripted", action="store_true", help="use the scripted model even if a key is set")
    demo.add_argument("--json", action="store_true", help="print events as JSON lines")
    add_workdir(demo)
    demo.set_defaults(func=_demo, fast_exit=True)


def _run(args: argparse.Namespace) -> int:
    path = Path(args.spec)
    if not path.is_file():
        raise UsageError(f"spec file {args.spec!r} not found; give the path of a YAML or JSON spec")
    early = None
    if args.spawn_first and not args.session:  # the harness first (before asyncio), the rest while it boots
        from harness_run.cli._prespawn import cache_flags, prespawn

        early = prespawn(args.spec, args.prompt, args.workdir, cache_flags(args.model, args.secret))
    import asyncio

    return asyncio.run(_run_async(args, path, early))


async def _run_async(args: argparse.Namespace, path: Path, early: Early | None) -> int:
    try:
        if early is not None:
            await early.adopt()
        from harness_run.spec import AgentSpec, TurnConfig

        spec = AgentSpec.from_yaml(path)
        config = TurnConfig(model=args.model) if args.model else None
        secrets = secrets_from_env(args.secret)
        from harness_run import telemetry

        if not telemetry.configure_from_env("harness-run"):  # only with the otel extra and OTEL_* set
            return await _turn(spec, args.prompt, secrets, config, args, early)
        try:  # the turn's spans under one root span, flushed before the fast exit
            with telemetry.span("harness-run run", engine=spec.name):
                return await _turn(spec, args.prompt, secrets, config, args, early)
        finally:
            telemetry.shutdown()
    finally:
        if early is not None:
            await early.discard()


async def _turn(
    spec: Any,
    prompt: str,
    secrets: dict[str, str],
    config: Any,
    args: argparse.Namespace,
    early: Early | None = None,
) -> int:
    from harness_run import local
    from harness_run.cli._view import EventView
    from harness_run.runtime.local import LocalEngine

    view = EventView(as_json=args.json)
    engine = local.deploy(spec, workdir=args.workdir)
    try:
        if args.session:
            session = engine.get_session(args.session)
        else:
            if early is not None and isinstance(engine, LocalEngine):
                engine.spawn_first(early.spawn_first())
            session = engine.start_session(session_id=early.session_id if early is not None else None)
            if early is not None:
                early.kept = True  # the session's directories are the session's now
        run = session.run(prompt, secrets=secrets, config=config)
        async for event in run:
            if not gc.isenabled():  # the CLI is running: start-up's objects are for keeps
                settle_memory()
            view.event(event)
        result = await run
        view.result(result)
        if not args.json:
            print(f'continue with: harness-run run {args.spec} "..." --session {session.session_id}')
        return 1 if result.is_error else 0
    finally:
        engine.close()


def _demo(args: argparse.Namespace) -> int:
    import asyncio

    return asyncio.run(_demo_turn(args))


async def _demo_turn(args: argparse.Namespace) -> int:
    from harness_run import AgentSpec, local
    from harness_run.cli._view import EventView
    from harness_run.runtime.local import default_workdir, resolve_workdir
    from harness_run.testing import ScriptedModel, shell, text, write_file

    spec = AgentSpec(
        name="demo",
        harness="claude-code",
        model="claude-sonnet-4-6",
        system_prompt="You are a careful coding agent. Keep answers short.",
    )
    view = EventView(as_json=args.json)
    scripted = args.scripted or not os.environ.get("ANTHROPIC_API_KEY")
    model = ScriptedModel(
        [
            write_file("fib.py", _DEMO_CODE),
            shell("python3 fib.py"),
            text("Created fib.py; fibonacci(10) = 55."),
        ]
    )
    secrets: dict[str, str] = {}
    if scripted:
        model.start()
        secrets = {"ANTHROPIC_BASE_URL": model.url, "ANTHROPIC_API_KEY": "scripted-demo-key"}
        if not args.json:
            print(f"scripted model on {model.url} (no API key needed); the real `claude` CLI runs the turn\n")
    engine = local.deploy(spec, workdir=args.workdir)
    try:
        session = engine.start_session()
        run = session.run(_DEMO_PROMPT, secrets=secrets)
        async for event in run:
            if not gc.isenabled():
                settle_memory()
            view.event(event)
        result = await run
        view.result(result)
        if not args.json:
            workdir = resolve_workdir(args.workdir or default_workdir())
            workspace = workdir / "sessions" / session.session_id / "workspace"
            print(f"workspace: {workspace}")
            print(f"history:   harness-run history {session.session_id}")
        return 1 if result.is_error else 0
    finally:
        engine.close()
        if scripted:
            model.stop()
