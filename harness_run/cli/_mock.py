"""``harness-run mock-model``: serve a scripted model on loopback for offline harness runs."""

from __future__ import annotations

import argparse
from typing import Any


def register(sub: Any) -> None:
    """Add the ``mock-model`` subcommand to the ``harness-run`` parser."""
    parser: argparse.ArgumentParser = sub.add_parser(
        "mock-model",
        help="serve a scripted model (Anthropic Messages, OpenAI Responses and Chat) on loopback",
        description="Serve replies from a YAML/JSON script so harness CLIs can run offline. "
        "Prints the env vars that point each harness at it; stop with Ctrl-C.",
    )
    parser.add_argument("--script", metavar="FILE", help="YAML or JSON script (default: empty script)")
    parser.add_argument("--host", default="127.0.0.1", help="interface to bind (default: 127.0.0.1)")
    parser.add_argument(
        "--port", type=int, default=8765, help="port to bind, 0 = any free port (default: 8765)"
    )
    parser.set_defaults(func=_handler)


def _handler(args: argparse.Namespace) -> int:
    from harness_run.testing import serve_forever

    return serve_forever(args.script, args.host, args.port)
