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
    _register_cluster(serve)
    serve.set_defaults(func=_serve)
    commands = serve.add_subparsers(dest="serve_command", metavar="keys|deploy")
    keys = commands.add_parser("keys", help="create, list or revoke API keys")
    _register_deploy(commands)
    actions = keys.add_subparsers(dest="keys_command", metavar="ACTION", required=True)
    create = actions.add_parser("create", help="make a key; it is printed once, as the last word")
    create.add_argument("--name", required=True, help="who or what uses the key")
    listing = actions.add_parser("list", help="list keys (ids, names, dates; never the keys)")
    revoke = actions.add_parser("revoke", help="revoke a key by its id")
    revoke.add_argument("key_id", metavar="KEY_ID")
    for parser in (create, listing, revoke):
        parser.add_argument("--store", default=None, help=_STORE_HELP)
        parser.set_defaults(func=_keys)


def _register_cluster(parser: Any) -> None:
    """The flags naming the cluster of sandbox engines (``serve`` and ``serve deploy``)."""
    group = parser.add_argument_group(
        "sandbox engines",
        "serve the store's sandbox engines (harness_run.sandbox.deploy) on this cluster; the kubeconfig "
        "comes from $KUBECONFIG (else ~/.kube/config, or the pod's own cluster inside one)",
    )
    group.add_argument(
        "--project", default=None, help="GCP project of the cluster (default $GOOGLE_CLOUD_PROJECT)"
    )
    group.add_argument(
        "--location",
        default=None,
        help="region of the cluster, e.g. us-central1 (default $HARNESS_RUN_LOCATION)",
    )
    which = group.add_mutually_exclusive_group()
    which.add_argument(
        "--cluster",
        default=None,
        metavar="NAME",
        help="the GKE cluster's name (default $HARNESS_RUN_CLUSTER, else the current kubeconfig context)",
    )
    which.add_argument(
        "--context", default=None, help="a kubeconfig context, checked against --project/--location"
    )
    group.add_argument(
        "--namespace",
        default=None,
        help="namespace the engines are deployed in (default $HARNESS_RUN_NAMESPACE or default)",
    )
    group.add_argument(
        "--router-url",
        default=None,
        metavar="URL",
        help="reach the sandboxes through this sandbox router (default $HARNESS_RUN_ROUTER_URL; needed "
        "outside the cluster's network)",
    )


def _sandbox_access(args: argparse.Namespace) -> Any:
    from harness_run.server import SandboxAccess

    return SandboxAccess.from_env(
        project=args.project,
        location=args.location,
        cluster=args.cluster,
        context=args.context,
        namespace=args.namespace,
        router_url=args.router_url,
    )


def _register_deploy(commands: Any) -> None:
    deploy = commands.add_parser(
        "deploy",
        help="build the server image and create or update its Cloud Run service",
        description="Build the server image (skipped when the registry has its digest), push it, and "
        "create or update a Cloud Run service running `harness-run serve` over a gs:// store. Nothing "
        "is sent when the image and the settings are unchanged. Prints the service URL.",
    )
    deploy.add_argument("--project", required=True, help="the GCP project id")
    deploy.add_argument("--region", required=True, help="the Cloud Run region, e.g. us-central1")
    deploy.add_argument(
        "--store", default=None, help="history store gs://bucket/prefix (default gs://<project>-harness-run)"
    )
    deploy.add_argument(
        "--service", default="harness-run", help="Cloud Run service name (default harness-run)"
    )
    deploy.add_argument(
        "--service-account",
        default=None,
        help="run as (default harness-run-server@<project>.iam.gserviceaccount.com)",
    )
    deploy.add_argument(
        "--registry",
        default=None,
        help="image repository prefix (default <region>-docker.pkg.dev/<project>/harness-run)",
    )
    deploy.add_argument(
        "--spec", action="append", default=[], metavar="FILE", help="bake in and serve this spec"
    )
    deploy.add_argument(
        "--harness", action="append", default=[], metavar="NAME", help="also install this harness CLI"
    )
    deploy.add_argument("--min-instances", type=int, default=1, help="instances kept running (default 1)")
    deploy.add_argument(
        "--max-instances", type=int, default=1, help="at most this many instances (default 1)"
    )
    deploy.add_argument(
        "--private", action="store_true", help="keep Cloud Run's IAM invoker check in front of the API keys"
    )
    deploy.add_argument(
        "--base-image", default=None, help="image to build on (default python:3.12-slim-bookworm)"
    )
    deploy.add_argument(
        "--ca-file", action="append", default=[], metavar="PEM", help="extra CA trusted in the build"
    )
    deploy.add_argument("--build-network", default=None, help="Docker network mode of the build (e.g. host)")
    group = deploy.add_argument_group(
        "sandbox engines", "the cluster the store's sandbox engines claim on (told to the service)"
    )
    group.add_argument("--location", default=None, help="region of the cluster (default --region)")
    group.add_argument(
        "--cluster", default=None, metavar="NAME", help="the GKE cluster's name (default harness-run)"
    )
    group.add_argument(
        "--namespace", default=None, help="namespace the engines are deployed in (default default)"
    )
    group.add_argument(
        "--router-url", default=None, metavar="URL", help="reach the sandboxes through this sandbox router"
    )
    deploy.set_defaults(func=_deploy)


def _deploy(args: argparse.Namespace) -> int:
    from harness_run.compiler import DEFAULT_BASE_IMAGE, ImageOptions
    from harness_run.server import SandboxAccess, deploy_server
    from harness_run.spec import AgentSpec

    image = ImageOptions(
        base_image=args.base_image or DEFAULT_BASE_IMAGE,
        ca_files=args.ca_file,
        build_network=args.build_network,
        registry=args.registry,
    )
    done = deploy_server(
        project=args.project,
        region=args.region,
        store=args.store,
        service=args.service,
        service_account=args.service_account,
        specs=[AgentSpec.from_yaml(path) for path in args.spec],
        harnesses=args.harness,
        image=image,
        min_instances=args.min_instances,
        max_instances=args.max_instances,
        public=not args.private,
        sandbox=SandboxAccess(
            location=args.location,
            cluster=args.cluster,
            namespace=args.namespace or "default",
            router_url=args.router_url,
        ),
    )
    print(f"harness-run server {done.action}: {done.url}", flush=True)
    return 0


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
        sandbox = _sandbox_access(args)
        asyncio.run(
            serve(args.store, specs=specs, host=args.host, port=args.port, ready=ready, sandbox=sandbox)
        )
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
