"""``harness-run serve``: the team server; ``harness-run serve keys create|list|revoke``: its API keys."""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
import time
from typing import Any

__all__ = ["register"]

_STORE_HELP = "the history store: a directory or gs://bucket/prefix (default: $HARNESS_RUN_HOME)"


def register(sub: Any) -> None:
    serve = sub.add_parser("serve", help="serve engines over HTTP + SSE (and manage its API keys)")
    serve.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    serve.add_argument("--port", type=int, default=8080, help="port (default 8080; 0 picks a free one)")
    serve.add_argument("--store", default=None, help=_STORE_HELP)
    serve.add_argument(
        "--spec", action="append", default=[], metavar="FILE", help="also serve this spec (repeatable)"
    )
    serve.set_defaults(func=_serve)
    keys = serve.add_subparsers(dest="serve_command", metavar="keys").add_parser(
        "keys", help="create, list or revoke API keys"
    )
    actions = keys.add_subparsers(dest="keys_command", metavar="ACTION", required=True)
    create = actions.add_parser("create", help="make a key; it is printed once, as the last word")
    create.add_argument("--name", required=True, help="who or what uses the key")
    listing = actions.add_parser("list", help="list keys (ids, names, dates; never the keys)")
    revoke = actions.add_parser("revoke", help="revoke a key by its id")
    revoke.add_argument("key_id", metavar="KEY_ID")
    for parser in (create, listing, revoke):
        parser.add_argument("--store", default=None, help=_STORE_HELP)
        parser.set_defaults(func=_keys)


def _serve(args: argparse.Namespace) -> int:
    from harness_run.server import serve
    from harness_run.spec import AgentSpec

    specs = [AgentSpec.from_yaml(path) for path in args.spec]
    logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stderr)

    def ready(port: int) -> None:
        print(f"harness-run server listening on http://{args.host}:{port}", flush=True)

    from harness_run.vocab import telemetry

    telemetry.configure_from_env("harness-run-server")  # only with the otel extra and OTEL_* set
    try:
        asyncio.run(serve(args.store, specs=specs, host=args.host, port=args.port, ready=ready))
    finally:
        telemetry.shutdown()
    return 0


def _keys(args: argparse.Namespace) -> int:
    from harness_run.server import create_key, key_store, list_keys, open_server_store, revoke_key

    history, _ = open_server_store(args.store)
    try:
        keys = key_store(history)
        if args.keys_command == "create":
            record, key = create_key(keys, args.name)
            print(f"created API key {record.key_id} ({record.name}); it is shown only now:")
            print(key)
        elif args.keys_command == "list":
            records = list_keys(keys)
            if not records:
                print("no API keys yet; make one with `harness-run serve keys create --name NAME`")
            for r in records:
                state = "revoked " + _when(r.revoked_at) if r.revoked_at is not None else "active"
                print(f"{r.key_id}  {r.name:24}  created {_when(r.created_at)}  {state}")
        else:
            record = revoke_key(keys, args.key_id)
            print(f"revoked API key {record.key_id} ({record.name})")
    finally:
        history.close()
    return 0


def _when(stamp: float | None) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(stamp or 0))
