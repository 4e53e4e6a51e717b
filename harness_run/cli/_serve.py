"""``harness-run serve``: the team server; ``harness-run serve keys create|list|revoke``: its API keys."""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
import time
from typing import Any

from harness_run.errors import UsageError
from harness_run.vocab.gcp import DEFAULT_SERVICE

__all__ = ["register"]

_STORE_HELP = "the history store: a directory or gs://bucket/prefix (required)"


def register(sub: Any) -> None:
    serve = sub.add_parser("serve", help="serve engines over HTTP + SSE (and manage its API keys)")
    serve.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    serve.add_argument("--port", type=int, default=8080, help="port (default 8080; 0 picks a free one)")
    serve.add_argument("--store", default=None, help=_STORE_HELP)
    serve.add_argument(
        "--spec", action="append", default=[], metavar="FILE", help="also serve this spec (repeatable)"
    )
    serve.add_argument(
        "--engine",
        action="append",
        default=[],
        metavar="NAME",
        help="serve this engine recorded in the store (repeatable)",
    )
    serve.add_argument(
        "--serve-recorded", action="store_true", help="serve every engine recorded in the store"
    )
    serve.add_argument(
        "--allow-exec",
        action="store_true",
        help="let keys with the exec scope run shell commands on local engines, i.e. on this host "
        "(see docs/team-server.md)",
    )
    serve.add_argument(
        "--agent-uids",
        default=None,
        metavar="FIRST-LAST|off",
        help="local engines' agents run as a uid of their own per session, from this range (default "
        "1700000000-1700999999 when serve runs as root; without root a local engine is refused "
        "unless off). off: agents run as the server's user and can read its store and secret",
    )
    serve.add_argument(
        "--warm-pool",
        type=int,
        default=0,
        metavar="N",
        help="keep N harness processes started per local engine, waiting for new sessions "
        "(docs/warm-processes.md; default 0)",
    )
    serve.add_argument(
        "--idle-ttl",
        type=float,
        default=None,
        metavar="SECONDS",
        help="keep a session's harness process this long after its turn, for its next one "
        "(local engines; default 30; 0: a process per turn)",
    )
    _register_policy(serve)
    _register_cluster(serve)
    serve.set_defaults(func=_serve)
    commands = serve.add_subparsers(dest="serve_command", metavar="keys|deploy")
    keys = commands.add_parser("keys", help="create, list or revoke API keys")
    _register_deploy(commands)
    actions = keys.add_subparsers(dest="keys_command", metavar="ACTION", required=True)
    create = actions.add_parser("create", help="make a key; it is printed once, as the last word")
    create.add_argument("--name", required=True, help="who or what uses the key")
    create.add_argument(
        "--scope",
        action="append",
        default=[],
        choices=["read", "turn", "exec", "admin"],
        help="what the key may do (repeatable; default turn): read its sessions; turn: also start "
        "sessions and turns; exec: also run commands; admin: everything on every key's sessions",
    )
    create.add_argument("--budget-usd", type=float, default=None, metavar="USD", help="spend cap per period")
    create.add_argument(
        "--per", choices=["day", "month"], default=None, help="the budget's period (default month, UTC)"
    )
    listing = actions.add_parser("list", help="list keys (ids, names, dates; never the keys)")
    revoke = actions.add_parser("revoke", help="revoke a key by its id")
    revoke.add_argument("key_id", metavar="KEY_ID")
    for parser in (create, listing, revoke):
        parser.add_argument("--store", default=None, help=_STORE_HELP)
        parser.set_defaults(func=_keys)


def _register_policy(parser: Any) -> None:
    """The operator policy: what callers may change (a file, and flags for the common cases)."""
    group = parser.add_argument_group(
        "operator policy",
        "what API-key holders may change per session or turn (default: only tighten the engine's "
        "settings; see docs/team-server.md)",
    )
    group.add_argument("--policy", default=None, metavar="FILE", help="the policy as YAML")
    group.add_argument(
        "--host-dir-root", default=None, metavar="DIR", help="allow workspace.host_dir under DIR"
    )
    group.add_argument(
        "--allow-model",
        action="append",
        default=[],
        metavar="MODEL",
        help="a model callers may pick besides the spec's (glob, repeatable)",
    )
    group.add_argument(
        "--allow-endpoints",
        action="store_true",
        help="callers may set a model endpoint (*_BASE_URL, model_base_url) with their own key",
    )
    group.add_argument(
        "--allow-private-endpoints",
        action="store_true",
        help="remote callers' endpoints may be on loopback, link-local or private addresses",
    )
    group.add_argument(
        "--allow-vertex",
        action="store_true",
        help="callers may run Claude on Vertex AI with their own credentials",
    )
    group.add_argument(
        "--allow-permission-mode",
        action="append",
        default=[],
        metavar="MODE",
        help="a permission_mode callers may choose (repeatable)",
    )


def _policy(args: argparse.Namespace) -> Any:
    from harness_run.server import ServerPolicy

    policy = ServerPolicy.from_file(args.policy) if args.policy else ServerPolicy()
    changes: dict[str, Any] = {}
    if args.host_dir_root:
        changes["host_dir_root"] = args.host_dir_root
    if args.allow_model:
        changes["allowed_models"] = (*policy.allowed_models, *args.allow_model)
    if args.allow_permission_mode:
        changes["permission_modes"] = (*policy.permission_modes, *args.allow_permission_mode)
    for flag in ("allow_endpoints", "allow_private_endpoints", "allow_vertex"):
        if getattr(args, flag):
            changes[flag] = True
    return policy.override(**changes) if changes else policy


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
        "is sent when the image and the settings are unchanged. Prints the service URL. The service is "
        "private (callers need roles/run.invoker) unless --public, and serves only the store's sandbox "
        "engines: a local or container engine would run its agent inside the service, as its identity.",
    )
    deploy.add_argument("--project", required=True, help="the GCP project id")
    deploy.add_argument("--region", required=True, help="the Cloud Run region, e.g. us-central1")
    deploy.add_argument(
        "--store", default=None, help="history store gs://bucket/prefix (default gs://<project>-harness-run)"
    )
    deploy.add_argument(
        "--service", default=DEFAULT_SERVICE, help=f"Cloud Run service name (default {DEFAULT_SERVICE})"
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
        "--spec",
        action="append",
        default=[],
        metavar="FILE",
        help="refused: a baked-in spec is a local engine (deploy it with harness_run.sandbox.deploy)",
    )
    deploy.add_argument(
        "--harness", action="append", default=[], metavar="NAME", help="also install this harness CLI"
    )
    deploy.add_argument("--min-instances", type=int, default=1, help="instances kept running (default 1)")
    deploy.add_argument(
        "--max-instances", type=int, default=1, help="at most this many instances (default 1)"
    )
    deploy.add_argument(
        "--public",
        action="store_true",
        help="let anyone call the service (IAM invoker check off): the API keys are then the only gate",
    )
    deploy.add_argument("--private", action="store_true", help=argparse.SUPPRESS)  # the default now
    deploy.add_argument(
        "--secret",
        action="append",
        default=[],
        metavar="NAME=projects/P/secrets/S:latest",
        help="set NAME from a Secret Manager secret version (repeatable; e.g. ANTHROPIC_API_KEY=...)",
    )
    deploy.add_argument(
        "--env",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="a plain setting (repeatable; readable in the service's configuration: use --secret for keys)",
    )
    deploy.add_argument(
        "--concurrency",
        type=int,
        default=None,
        metavar="N",
        help="requests per instance (default 250; each open event stream holds one)",
    )
    deploy.add_argument(
        "--timeout",
        type=int,
        default=None,
        metavar="SECONDS",
        help="request timeout, up to 3600 (default 3600: event streams of long turns)",
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

    if args.public and args.private:
        raise UsageError("--public and --private contradict each other; give one (private is the default)")
    env: dict[str, str] = {}
    for item in args.env:
        name, sep, value = item.partition("=")
        if not sep or not name:
            raise UsageError(f"--env {name!r}: not NAME=VALUE")
        env[name] = value

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
        public=args.public,
        secrets=args.secret,
        env=env,
        concurrency=args.concurrency,
        request_timeout=args.timeout,
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

    from harness_run import telemetry

    telemetry.configure_from_env("harness-run-server")  # only with the otel extra and OTEL_* set
    try:
        sandbox = _sandbox_access(args)
        policy = _policy(args)
        asyncio.run(
            serve(
                args.store,
                specs=specs,
                host=args.host,
                port=args.port,
                ready=ready,
                sandbox=sandbox,
                engines=args.engine,
                serve_recorded=args.serve_recorded,
                allow_exec=args.allow_exec,
                policy=policy,
                agent_uids=args.agent_uids,
                warm_pool=args.warm_pool,
                idle_ttl=args.idle_ttl,
            )
        )
    finally:
        telemetry.shutdown()
    return 0


def _keys(args: argparse.Namespace) -> int:
    from harness_run.server import create_key, key_store, list_keys, open_server_store, revoke_key

    if not args.store:
        raise UsageError("serve keys needs --store: the same store `harness-run serve --store` serves")
    audit = logging.getLogger("harness_run.server.audit")
    logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stderr)
    history, _ = open_server_store(args.store)
    try:
        keys = key_store(history)
        if args.keys_command == "create":
            record, key = create_key(
                keys, args.name, scopes=args.scope, budget_usd=args.budget_usd, budget_per=args.per
            )
            audit.info(
                "key change: created key=%s name=%s scopes=%s", record.key_id, record.name, record.scopes
            )
            print(
                f"created API key {record.key_id} ({record.name}, {','.join(record.scopes)}); shown only now:"
            )
            print(key)
        elif args.keys_command == "list":
            _list(list_keys(keys), history)
        else:
            record = revoke_key(keys, args.key_id)
            audit.info("key change: revoked key=%s", record.key_id)
            print(f"revoked API key {record.key_id} ({record.name})")
    finally:
        history.close()
    return 0


def _list(records: list[Any], history: Any) -> None:
    from harness_run.server import period_start, record_valid, server_secret, spent_by

    if not records:
        print("no API keys yet; make one with `harness-run serve keys create --name NAME`")
        return
    secret = server_secret()
    for r in records:
        state = "revoked " + _when(r.revoked_at) if r.revoked_at is not None else "active"
        if not record_valid(r, secret):
            state = "INVALID (not sealed by this server's secret: never accepted; revoke and re-create)"
        spent = spent_by(history, r.key_id, period_start(r.budget_per))
        budget = (
            f"${spent:.2f} of ${r.budget_usd:g}/{r.budget_per}" if r.budget_usd else f"${spent:.2f} spent"
        )
        scopes = ",".join(r.scopes)
        print(f"{r.key_id}  {r.name:24}  {scopes:14}  {budget:24}  created {_when(r.created_at)}  {state}")


def _when(stamp: float | None) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(stamp or 0))
