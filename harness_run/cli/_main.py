"""Entry point: builds the argparse tree from the per-noun modules and maps errors to exit codes.

Exit codes: 0 ok, 1 the run failed (``is_error``), 2 bad input (spec, arguments), 3 infrastructure.
Errors print one readable message, never a traceback (set ``HARNESS_RUN_DEBUG=1`` to see one).

Start-up and exit are on the critical path of a one-turn ``harness-run run`` (the harness CLI is
spawned only once the spec is validated): commands that set ``fast_exit`` run their start-up with
the garbage collector off (imports and schema builds allocate ~10^5 long-lived objects; the command
freezes them with ``settle_memory()`` once its work is under way) and, from the console script,
end with ``os._exit`` once everything is closed and flushed, skipping an interpreter teardown that
frees those objects one by one (0.1-0.3 s on the reference VM).
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import os
import sys
from collections.abc import Callable, Sequence
from importlib import import_module

from harness_run.errors import HarnessRunError, InfrastructureError, RunError, UsageError

# Each module defines ``register(subparsers)``; commands set ``func`` (args -> exit code).
_COMMAND_MODULES = ("_spec", "_run", "_sessions", "_mock", "_doctor", "_serve", "_top", "_chat")

Handler = Callable[[argparse.Namespace], int]


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        self.print_usage(sys.stderr)
        sys.stderr.write(f"{self.prog}: error: {message}\n")
        raise SystemExit(2)


def build_parser(modules: Sequence[str] = _COMMAND_MODULES) -> argparse.ArgumentParser:
    """The argument parser of the commands in ``modules`` (default: all of them)."""
    parser = _Parser(prog="harness-run", description="Run coding agents through one API.")
    from harness_run.vocab.version import __version__

    parser.add_argument("--version", action="version", version=f"harness-run {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    for name in modules:
        try:
            module = import_module(f"harness_run.cli.{name}")
        except ModuleNotFoundError as exc:  # a command module not written yet
            if exc.name == f"harness_run.cli.{name}":
                continue
            raise
        module.register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    console = argv is None
    if console:
        os.environ.setdefault("PYDANTIC_DISABLE_PLUGINS", "__all__")  # skips an entry-point scan
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        words = list(sys.argv[1:] if argv is None else argv)
        # `run` needs only its own module: the other commands' imports are not on a turn's start
        parser = build_parser(("_run",) if words[:1] == ["run"] else _COMMAND_MODULES)
        args = parser.parse_args(words)
    finally:
        if was_enabled:
            gc.enable()
    if console and hasattr(args, "spawn_first"):  # a fresh process: `run` may spawn the harness first
        args.spawn_first = True
    fast_exit = bool(getattr(args, "fast_exit", False))
    if fast_exit:
        gc.disable()  # until the command calls settle_memory()
    try:
        code = _dispatch(parser, args)
    finally:
        if was_enabled and not gc.isenabled():
            gc.enable()
    if console and fast_exit:
        _exit_now(code)
    return code


def _exit_now(code: int) -> None:
    """End the process without the interpreter's teardown: the command has closed its engine and
    store; only the standard streams need flushing."""
    import logging

    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):  # a closed pipe (`| head`): nothing to write to
            stream.flush()
    os._exit(code)


def _dispatch(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    func: Handler | None = getattr(args, "func", None)
    if func is None:
        parser.print_help()
        return 2
    try:
        return func(args)
    except KeyboardInterrupt:
        sys.stderr.write("interrupted\n")
        return 130
    except ModuleNotFoundError as exc:
        extra = _extra_for(args.command, exc.name)
        if extra is None:
            raise
        return _fail(
            UsageError(
                f"`harness-run {args.command}` needs {exc.name}, which is not installed: "
                f'pip install "harness-run[{extra}]"'
            ),
            2,
        )
    except UsageError as exc:
        return _fail(exc, 2)
    except InfrastructureError as exc:
        return _fail(exc, 3)
    except RunError as exc:
        return _fail(exc, 1)
    except HarnessRunError as exc:
        return _fail(exc, 1)


_EXTRA_OF = {"aiohttp": "local", "rich": "local", "prompt_toolkit": "local"}
"""The optional dependency a command needs -> the extra that installs it (``serve``: ``_SERVE_EXTRA_OF``)."""
_SERVE_EXTRA_OF = {"aiohttp": "server"}


def _extra_for(command: str | None, module: str | None) -> str | None:
    """The extra that installs ``module`` for ``command``; None when it is not an optional one."""
    top = (module or "").partition(".")[0]
    return (_SERVE_EXTRA_OF if command == "serve" else _EXTRA_OF).get(top)


def _fail(exc: BaseException, code: int) -> int:
    if os.environ.get("HARNESS_RUN_DEBUG"):
        raise exc
    from harness_run.cli._text import safe

    sys.stderr.write(f"error: {safe(str(exc))}\n")  # it may quote a server or the agent
    return code


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
