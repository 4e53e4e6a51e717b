"""``harness-run-gcp-setup``: prepare a GCP project for the sandbox runtime (idempotent, additive)."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Sequence
from typing import TextIO

from harness_run.errors import UsageError
from harness_run.gcp._plan import AGENT_SANDBOX_VERSION, SetupOptions, Step, plan
from harness_run.gcp._setup import Audit, apply_step, audit_step, render
from harness_run.vocab.gcp import DEFAULT_CLUSTER, DEFAULT_LOCATION, DEFAULT_REPOSITORY

__all__ = ["main"]

_EPILOG = """\
exit codes: 0 ready (or applied), 1 something is missing (--check) or a step failed, 2 bad arguments.
Nothing is ever deleted or replaced, except broad grants that least privilege replaces: with
--engine the namespace-wide grant on the bucket (it would reach every engine's history), and the
team server's old bucket-wide object role and project-wide roles/container.developer (--check
flags them). Pass --engine NAME for each sandbox engine the team server serves: it reaches only
those engines' folders, keys/ and engines/. Running it again only adds what is still missing."""


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="harness-run-gcp-setup",
        description="Audit a GCP project for the harness-run sandbox runtime, show what is missing, "
        "and add it: APIs, Artifact Registry, the history bucket, a GKE cluster with a gVisor node pool "
        "and Agent Sandbox, Workload Identity access to GCS and Vertex AI, and the team server's "
        "Cloud Run API and service account.",
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--project", required=True, help="the GCP project id")
    p.add_argument(
        "--location", default=DEFAULT_LOCATION, help=f"region for everything (default {DEFAULT_LOCATION})"
    )
    p.add_argument("--cluster", default=DEFAULT_CLUSTER, help=f"GKE cluster name (default {DEFAULT_CLUSTER})")
    p.add_argument(
        "--repository",
        default=DEFAULT_REPOSITORY,
        help=f"Artifact Registry repository (default {DEFAULT_REPOSITORY})",
    )
    p.add_argument("--bucket", default="", help="history bucket (default <project>-harness-run)")
    p.add_argument("--namespace", default="default", help="Kubernetes namespace of the sandboxes")
    p.add_argument("--node-pool", default="agent-sandbox-pool", help="gVisor node pool name")
    p.add_argument("--machine-type", default="n2-standard-4", help="node pool machine type")
    p.add_argument(
        "--engine",
        action="append",
        default=[],
        metavar="NAME",
        help="isolate this engine's history (repeat per engine): a managed folder history/NAME/ that only "
        "its pods (service account NAME-agent) reach; the namespace-wide grant on the bucket is then "
        "removed",
    )
    p.add_argument(
        "--history-prefix",
        default="",
        metavar="PATH",
        help="the store URL's path in the bucket, when it has one (gs://BUCKET/PATH)",
    )
    p.add_argument(
        "--secret",
        action="append",
        default=[],
        metavar="NAME=projects/P/secrets/S:latest",
        help="a model key the team server reads from Secret Manager (repeat per secret; as `serve deploy "
        "--secret` takes it): its account gets roles/secretmanager.secretAccessor on that secret only",
    )
    p.add_argument("--agent-sandbox-version", default=AGENT_SANDBOX_VERSION, help=argparse.SUPPRESS)
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--check", action="store_true", help="audit only; exit 1 if anything is missing")
    mode.add_argument("--dry-run", action="store_true", help="print every command; run none")
    p.add_argument("--yes", "-y", action="store_true", help="apply without asking")
    p.add_argument("--json", action="store_true", help="print the audit as JSON")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        options = SetupOptions(
            project=args.project,
            location=args.location,
            cluster=args.cluster,
            repository=args.repository,
            bucket=args.bucket,
            namespace=args.namespace,
            node_pool=args.node_pool,
            machine_type=args.machine_type,
            agent_sandbox_version=args.agent_sandbox_version,
            engines=tuple(args.engine),
            history_prefix=args.history_prefix,
            secrets=tuple(args.secret),
        )
    except UsageError as exc:
        print(f"harness-run-gcp-setup: error: {exc}", file=sys.stderr)
        return 2
    steps = plan(options)
    values = {"project_number": "PROJECT_NUMBER"}
    out = sys.stdout
    if args.dry_run:
        out.write(f"plan for project {options.project} (nothing is run; each step is skipped when done):\n")
        render([Audit(s, "unknown") for s in steps], values, out)
        return 0
    out.write(f"auditing project {options.project} ({len(steps)} steps, read-only)…\n")
    out.flush()
    audits = _audit_all(steps, values)
    if args.json:
        print(json.dumps([{"step": a.step.key, "outcome": a.outcome, "detail": a.detail} for a in audits]))
    else:
        render(audits, values, out)
    todo = [a for a in audits if a.outcome != "done"]
    summary = _summary(options, values)
    if not todo:
        out.write(f"ready: {summary}\n")
        return 0
    if args.check:
        out.write(f"{len(todo)} of {len(steps)} steps missing; run without --check to add them\n")
        return 1
    if any(a.outcome == "unknown" for a in audits) and not any(a.outcome == "done" for a in audits):
        out.write("cannot audit: install the Google Cloud CLI (gcloud) and kubectl, then log in\n")
        return 1
    if not args.yes:
        if not sys.stdin.isatty():
            out.write("re-run with --yes to apply these steps (no terminal to ask)\n")
            return 1
        if input(f"apply {len(todo)} steps? [y/N] ").strip().lower() not in ("y", "yes"):
            out.write("nothing applied\n")
            return 1
    return _apply(steps, values, out, lambda: _summary(options, values))


def _audit_all(steps: Sequence[Step], values: dict[str, str]) -> list[Audit]:
    audits: list[Audit] = []
    blocked: set[str] = set()
    for step in steps:
        audit = audit_step(step, values, blocked)
        if audit.outcome != "done":
            blocked.add(step.key)
        audits.append(audit)
    return audits


def _apply(steps: Sequence[Step], values: dict[str, str], out: TextIO, summary: Callable[[], str]) -> int:
    failed: set[str] = set()
    for i, step in enumerate(steps, 1):
        head = f"[{i:2}/{len(steps)}]"
        if audit_step(step, values, set()).outcome == "done":
            out.write(f"{head} ok   {step.title}\n")
            continue
        if any(n in failed for n in step.needs):
            failed.add(step.key)
            out.write(f"{head} skip {step.title} (an earlier step failed)\n")
            continue
        out.write(f"{head} add  {step.title}\n")
        out.flush()
        error = apply_step(step, values, out)
        if error is None and audit_step(step, values, set()).outcome != "done":
            error = "applied, but its audit still fails; check the output above"
        if error is not None:
            failed.add(step.key)
            out.write(f"         FAILED: {error}\n")
    if failed:
        out.write(f"{len(failed)} steps not done; fix the errors above and run again (it is safe)\n")
        return 1
    out.write(f"ready: {summary()}\n")
    return 0


def _summary(options: SetupOptions, values: dict[str, str]) -> str:
    del values
    served = (
        f"; the team server reaches the sessions of {', '.join(options.engines)}"
        if options.engines
        else "; the team server reaches no engine's sessions yet: run again with --engine NAME for each "
        "sandbox engine it serves"
    )
    target = (
        f"cluster={options.cluster!r}"
        if options.namespace == "default"
        else f"cluster=ClusterTarget(name={options.cluster!r}, namespace={options.namespace!r})"
    )
    return (
        f"sandbox.deploy(spec, project={options.project!r}, location={options.location!r}) pushes to "
        f"{options.registry} and keeps history in gs://{options.bucket_name}; add {target} to name "
        "the cluster instead of using the current kubectl context; `harness-run serve deploy --project "
        f"{options.project} --region {options.location}` runs the team server on Cloud Run as "
        f"{options.server_account}{served}"
    )
