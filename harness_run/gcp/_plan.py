"""The GCP setup plan: a pure function from options to ordered, idempotent steps.

Each step has a read-only audit (a command whose success means "already done") and the commands
that make it so. Nothing is ever deleted or replaced (steps only add what is missing), except the
namespace-wide grant on the bucket when engines' history is isolated (``_history``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from harness_run.errors import UsageError
from harness_run.gcp._history import history_steps
from harness_run.gcp._server import server_steps
from harness_run.gcp._step import Step
from harness_run.vocab.gcp import (
    DEFAULT_CLUSTER,
    DEFAULT_LOCATION,
    DEFAULT_REPOSITORY,
    SERVER_ACCOUNT,
    SecretRef,
    parse_secret,
    server_account_email,
)

__all__ = ["AGENT_SANDBOX_VERSION", "SetupOptions", "Step", "plan", "setup_scripts_dir"]

AGENT_SANDBOX_VERSION = "v0.5.6"
"""The kubernetes-sigs/agent-sandbox release installed when the cluster has no Agent Sandbox yet."""

_APIS = (
    "container.googleapis.com",
    "artifactregistry.googleapis.com",
    "storage.googleapis.com",
    "aiplatform.googleapis.com",
    "iam.googleapis.com",
    "iamcredentials.googleapis.com",
    "run.googleapis.com",
    "secretmanager.googleapis.com",
)

_PROJECT = re.compile(r"^[a-z][a-z0-9-]{4,28}[a-z0-9]$")
_NAME = re.compile(r"^[a-z]([-a-z0-9]{0,38}[a-z0-9])?$")
_LOCATION = re.compile(r"^[a-z]+-[a-z]+[0-9](-[a-z])?$")
_ENGINE = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")


def setup_scripts_dir() -> Path:
    """``setup_scripts/`` of a source checkout, or the copy inside the installed package."""
    here = Path(__file__).resolve().parent
    for candidate in (here.parents[1] / "setup_scripts", here.parent / "_setup_scripts"):
        if candidate.is_dir():
            return candidate
    return here.parents[1] / "setup_scripts"


@dataclass(frozen=True, slots=True)
class SetupOptions:
    """What ``harness-run-gcp-setup`` prepares. Defaults match ``sandbox.deploy()``'s."""

    project: str
    location: str = DEFAULT_LOCATION
    cluster: str = DEFAULT_CLUSTER
    repository: str = DEFAULT_REPOSITORY
    bucket: str = ""
    namespace: str = "default"
    node_pool: str = "agent-sandbox-pool"
    machine_type: str = "n2-standard-4"
    agent_sandbox_version: str = AGENT_SANDBOX_VERSION
    engines: tuple[str, ...] = ()
    """Engines whose history is isolated: each gets a managed folder only its pods reach."""
    history_prefix: str = ""
    """The store URL's prefix in the bucket (``gs://<bucket>/<prefix>``)."""
    secrets: tuple[str, ...] = ()
    """The server's model keys in Secret Manager (``NAME=projects/P/secrets/S:latest``, as ``serve
    deploy --secret`` takes them): the server's account may read each of them, nothing else."""

    def __post_init__(self) -> None:
        if not _PROJECT.match(self.project):
            raise UsageError(
                f"--project {self.project!r} is not a GCP project id (6-30 characters: lowercase "
                "letters, digits and hyphens, starting with a letter)"
            )
        if not _LOCATION.match(self.location):
            raise UsageError(f"--location {self.location!r} is not a GCP region, e.g. 'us-central1'")
        for flag, value in (
            ("--cluster", self.cluster),
            ("--repository", self.repository),
            ("--namespace", self.namespace),
            ("--node-pool", self.node_pool),
        ):
            if not _NAME.match(value):
                raise UsageError(f"{flag} {value!r} must be a lowercase name (letters, digits, hyphens)")
        if self.bucket and not re.match(r"^[a-z0-9][a-z0-9._-]{1,61}[a-z0-9]$", self.bucket):
            raise UsageError(f"--bucket {self.bucket!r} is not a valid bucket name")
        for engine in self.engines:
            if not _ENGINE.match(engine):
                raise UsageError(
                    f"--engine {engine!r} is not an engine name (the spec's name: 1-63 lowercase letters, "
                    "digits and hyphens, starting and ending with a letter or digit)"
                )
        if len(set(self.engines)) != len(self.engines):
            raise UsageError("--engine names an engine twice; name each engine once")
        refs = self.secret_refs
        if len({r.resource for r in refs}) != len(refs):
            raise UsageError("--secret names a secret twice; name each secret once")
        prefix = self.history_prefix.strip("/")
        if prefix != self.history_prefix or any(p in {"", ".", ".."} for p in prefix.split("/") if prefix):
            raise UsageError(
                f"--history-prefix {self.history_prefix!r} must be the store URL's path without "
                "leading or trailing '/', e.g. 'team-a' for gs://bucket/team-a"
            )

    @property
    def bucket_name(self) -> str:
        return self.bucket or f"{self.project}-harness-run"

    @property
    def registry(self) -> str:
        return f"{self.location}-docker.pkg.dev/{self.project}/{self.repository}"

    @property
    def secret_refs(self) -> tuple[SecretRef, ...]:
        return tuple(parse_secret(s) for s in self.secrets)

    @property
    def server_account(self) -> str:
        """``harness-run-server@<project>.iam.gserviceaccount.com``: the Cloud Run server's identity."""
        return server_account_email(self.project)

    def principal(self, project_number: str) -> str:
        """Every Kubernetes service account of the namespace, through Workload Identity Federation."""
        return (
            f"principalSet://iam.googleapis.com/projects/{project_number}/locations/global/"
            f"workloadIdentityPools/{self.project}.svc.id.goog/namespace/{self.namespace}"
        )


def plan(options: SetupOptions) -> list[Step]:
    """The ordered steps for ``options`` (pure and deterministic)."""
    o = options
    p = ("--project", o.project)
    loc = ("--location", o.location)
    bucket = f"gs://{o.bucket_name}"
    member = o.principal("{project_number}")
    script = str(setup_scripts_dir() / "install-agent-sandbox.sh")
    bucket_iam = Step(
        "bucket-iam",
        "sandboxes may write history",
        f"roles/storage.objectUser on {bucket} for the namespace's pods (Workload Identity)",
        ("gcloud", "storage", "buckets", "get-iam-policy", bucket, *p, "--format=json"),
        (
            (
                "gcloud",
                "storage",
                "buckets",
                "add-iam-policy-binding",
                bucket,
                *p,
                f"--member={member}",
                "--role=roles/storage.objectUser",
            ),
        ),
        expect=member,
        needs=("bucket", "project"),
    )
    history = history_steps(
        bucket=o.bucket_name,
        prefix=o.history_prefix,
        engines=o.engines,
        project=o.project,
        namespace=o.namespace,
        namespace_member=member,
    )
    return [
        Step(
            "project",
            f"project {o.project}",
            "the project must exist and gcloud must be logged in to it",
            ("gcloud", "projects", "describe", o.project, "--format=value(projectNumber)"),
            (),
        ),
        Step(
            "apis",
            "APIs enabled",
            "GKE, Artifact Registry, Cloud Storage, Vertex AI, IAM, Cloud Run and Secret Manager "
            "(the team server)",
            ("gcloud", "services", "list", "--enabled", *p, "--format=value(config.name)"),
            (("gcloud", "services", "enable", *_APIS, *p),),
            expect="\n".join(sorted(_APIS)),
            needs=("project",),
        ),
        Step(
            "registry",
            f"Artifact Registry {o.registry}",
            "sandbox.deploy() pushes the agent images here",
            ("gcloud", "artifacts", "repositories", "describe", o.repository, *loc, *p),
            (
                (
                    "gcloud", "artifacts", "repositories", "create", o.repository,
                    "--repository-format=docker", *loc, *p,
                    "--description=harness-run agent images",
                ),
            ),
            needs=("apis",),
        ),
        Step(
            "bucket",
            f"bucket {bucket}",
            "durable session history (events, snapshots, engine records)",
            ("gcloud", "storage", "buckets", "describe", bucket, *p),
            (
                (
                    "gcloud", "storage", "buckets", "create", bucket, *loc, *p,
                    "--uniform-bucket-level-access", "--public-access-prevention",
                ),
            ),
            needs=("apis",),
        ),
        Step(
            "cluster",
            f"GKE cluster {o.cluster}",
            "runs the sandboxes; Workload Identity lets pods reach GCS and Vertex AI without keys",
            ("gcloud", "container", "clusters", "describe", o.cluster, *loc, *p, "--format=value(name)"),
            (
                (
                    "gcloud", "container", "clusters", "create", o.cluster, *loc, *p,
                    f"--workload-pool={o.project}.svc.id.goog", "--release-channel=rapid",
                    "--num-nodes=1", "--enable-dataplane-v2",
                ),
            ),
            needs=("apis",),
        ),
        Step(
            "node-pool",
            f"gVisor node pool {o.node_pool}",
            "sandbox pods run under gVisor (runtimeClassName: gvisor)",
            (
                "gcloud", "container", "node-pools", "describe", o.node_pool,
                f"--cluster={o.cluster}", *loc, *p,
            ),
            (
                (
                    "gcloud", "container", "node-pools", "create", o.node_pool, f"--cluster={o.cluster}",
                    *loc, *p, "--sandbox=type=gvisor", "--image-type=cos_containerd",
                    f"--machine-type={o.machine_type}", "--workload-metadata=GKE_METADATA",
                    "--enable-autoscaling", "--min-nodes=1", "--max-nodes=10",
                ),
            ),
            needs=("cluster",),
        ),
        Step(
            "credentials",
            "kubectl context",
            "the following steps and sandbox.deploy() talk to the cluster",
            ("kubectl", "config", "current-context"),
            (("gcloud", "container", "clusters", "get-credentials", o.cluster, *loc, *p),),
            expect=f"_{o.project}_{o.location}_{o.cluster}",
            needs=("cluster",),
        ),
        Step(
            "agent-sandbox",
            "Agent Sandbox CRDs and controller",
            "SandboxTemplate, SandboxWarmPool and SandboxClaim (GKE's managed Agent Sandbox also counts)",
            (
                "kubectl", "get", "crd", "sandboxes.agents.x-k8s.io",
                "sandboxclaims.extensions.agents.x-k8s.io", "sandboxwarmpools.extensions.agents.x-k8s.io",
                "sandboxtemplates.extensions.agents.x-k8s.io",
            ),
            (("bash", script, o.agent_sandbox_version),),
            needs=("credentials",),
        ),
        Step(
            "namespace",
            f"namespace {o.namespace}",
            "where deploy() applies templates and pools",
            ("kubectl", "get", "namespace", o.namespace),
            (("kubectl", "create", "namespace", o.namespace),),
            needs=("credentials",),
        ),
        *(history or [bucket_iam]),
        Step(
            "vertex-iam",
            "sandboxes may call Vertex AI",
            "Claude models on the sandbox go through Vertex AI with no API key (roles/aiplatform.user)",
            ("gcloud", "projects", "get-iam-policy", o.project, "--format=json"),
            (
                (
                    "gcloud", "projects", "add-iam-policy-binding", o.project,
                    f"--member={member}", "--role=roles/aiplatform.user", "--condition=None",
                ),
            ),
            expect=member,
            needs=("project",),
        ),
        Step(
            "server-account",
            f"service account {o.server_account}",
            "the team server runs as it on Cloud Run (harness-run serve deploy)",
            ("gcloud", "iam", "service-accounts", "describe", o.server_account, *p),
            (
                (
                    "gcloud", "iam", "service-accounts", "create", SERVER_ACCOUNT, *p,
                    "--display-name=harness-run team server (Cloud Run)",
                ),
            ),
            needs=("apis",),
        ),
        *server_steps(
            project=o.project,
            bucket=o.bucket_name,
            prefix=o.history_prefix,
            namespace=o.namespace,
            email=o.server_account,
            engines=o.engines,
            secrets=o.secret_refs,
        ),
        Step(
            "docker-auth",
            f"docker can push to {o.location}-docker.pkg.dev",
            "for sandbox.deploy() from this machine (CI uses its own credentials)",
            ("sh", "-c", f"grep -qs '{o.location}-docker.pkg.dev' \"$HOME/.docker/config.json\""),
            (("gcloud", "auth", "configure-docker", f"{o.location}-docker.pkg.dev", "--quiet"),),
            needs=("registry",),
        ),
    ]  # fmt: skip
