"""Every Kubernetes and image-label name the compiler (and later the sandbox runtime) uses.

The Agent Sandbox CRDs (kubernetes-sigs/agent-sandbox v0.5.6) serve ``v1beta1`` as the storage
version (``v1alpha1`` is deprecated): ``Sandbox`` in ``agents.x-k8s.io``; ``SandboxTemplate``,
``SandboxClaim`` and ``SandboxWarmPool`` in ``extensions.agents.x-k8s.io``.
"""

from __future__ import annotations

from typing import Final, NamedTuple

__all__ = [
    "AGENT_ACCOUNT_SUFFIX",
    "ANNOTATION_DIGEST",
    "ANNOTATION_HARNESSES",
    "ANNOTATION_TOKEN_SHA256",
    "ANNOTATION_WORKER_PORT",
    "FQDN_NETWORK_POLICY",
    "IMAGE_LABEL_DIGEST",
    "IMAGE_LABEL_ENGINE",
    "IMAGE_LABEL_HARNESSES",
    "LABEL_COMPONENT",
    "LABEL_ENGINE",
    "LABEL_MANAGED_BY",
    "LABEL_VERSION",
    "MANAGED_BY",
    "NETWORK_POLICY",
    "PODINFO_DIR",
    "PODINFO_VOLUME",
    "SANDBOX",
    "SANDBOX_CLAIM",
    "SANDBOX_TEMPLATE",
    "SANDBOX_WARM_POOL",
    "SERVICE_ACCOUNT",
    "WORKER_PORT",
    "WORKER_PORT_NAME",
    "WORKLOAD_IDENTITY_ANNOTATION",
    "Kind",
    "agent_service_account",
    "engine_object_name",
]


class Kind(NamedTuple):
    """One API resource: group, version, kind and plural (for the dynamic/custom-objects API)."""

    group: str
    version: str
    kind: str
    plural: str

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version


AGENTS_GROUP: Final = "agents.x-k8s.io"
EXTENSIONS_GROUP: Final = "extensions.agents.x-k8s.io"
AGENT_SANDBOX_VERSION: Final = "v1beta1"

SANDBOX: Final = Kind(AGENTS_GROUP, AGENT_SANDBOX_VERSION, "Sandbox", "sandboxes")
SANDBOX_TEMPLATE: Final = Kind(EXTENSIONS_GROUP, AGENT_SANDBOX_VERSION, "SandboxTemplate", "sandboxtemplates")
SANDBOX_CLAIM: Final = Kind(EXTENSIONS_GROUP, AGENT_SANDBOX_VERSION, "SandboxClaim", "sandboxclaims")
SANDBOX_WARM_POOL: Final = Kind(
    EXTENSIONS_GROUP, AGENT_SANDBOX_VERSION, "SandboxWarmPool", "sandboxwarmpools"
)
SERVICE_ACCOUNT: Final = Kind("", "v1", "ServiceAccount", "serviceaccounts")
NETWORK_POLICY: Final = Kind("networking.k8s.io", "v1", "NetworkPolicy", "networkpolicies")
# GKE's FQDN egress allow-list (Dataplane V2); plain NetworkPolicy can only name IP blocks.
FQDN_NETWORK_POLICY: Final = Kind("networking.gke.io", "v1alpha1", "FQDNNetworkPolicy", "fqdnnetworkpolicies")

# Labels on every object and on the sandbox pods.
LABEL_ENGINE: Final = "harness-run.dev/engine"
LABEL_VERSION: Final = "harness-run.dev/version"
LABEL_COMPONENT: Final = "app.kubernetes.io/component"
LABEL_MANAGED_BY: Final = "app.kubernetes.io/managed-by"
MANAGED_BY: Final = "harness-run"
ANNOTATION_DIGEST: Final = "harness-run.dev/digest"
ANNOTATION_HARNESSES: Final = "harness-run.dev/harnesses"
# Per-claim pod annotations: sha256 of the claim's bearer token (the worker checks it), and the
# worker's port where it is not WORKER_PORT (the test controller runs many pods on one host).
ANNOTATION_TOKEN_SHA256: Final = "harness-run.dev/token-sha256"
# Kubelets refresh the downward-API file late (their sync period), so the client also writes a
# claim ticket into the history store before it contacts a claimed pod: a blob whose content is
# CLAIM_TICKET + the token's sha256. A worker whose annotations name no token yet accepts (and
# pins) the first token whose ticket is in the store: only a holder of the store's write access and
# the token itself can be first.
CLAIM_TICKET: Final = b"harness-run claim ticket v1\n"
ANNOTATION_WORKER_PORT: Final = "harness-run.dev/worker-port"
# GKE Workload Identity: the Google service account a Kubernetes ServiceAccount acts as.
WORKLOAD_IDENTITY_ANNOTATION: Final = "iam.gke.io/gcp-service-account"

# kube-dns pods (GKE and kubeadm clusters alike), the one egress every policy keeps.
DNS_POD_LABELS: Final[dict[str, str]] = {"k8s-app": "kube-dns"}

# OCI image labels (reverse-DNS, Docker convention).
IMAGE_LABEL_ENGINE: Final = "org.harness-run.engine"
IMAGE_LABEL_DIGEST: Final = "org.harness-run.digest"
IMAGE_LABEL_HARNESSES: Final = "org.harness-run.harnesses"

# The image's user and paths (shared by the Dockerfile context and the pod spec). AGENT_UID is the
# image's user: the worker runs as it and owns the store and its files. The harness CLI, its tools
# and ``exec`` commands run as AGENT_RUN_UID, without capabilities, so /proc/<worker>, the worker's
# memory and its files are closed to them. To switch uids the worker starts as root with only
# WORKER_CAPABILITIES (no-new-privileges), drops to AGENT_UID keeping them, and is told the agent's
# uid in AGENT_UID_ENV (the container and sandbox runtimes set it; unset: one uid, as before).
AGENT_UID: Final = 1000
AGENT_RUN_UID: Final = 1001
AGENT_UID_ENV: Final = "HARNESS_RUN_AGENT_UID"
WORKER_CAPABILITIES: Final = ("CHOWN", "DAC_OVERRIDE", "FOWNER", "KILL", "SETGID", "SETUID")
# Held by the worker only while root, to confine the agent's uid to loopback with per-uid netfilter
# rules in its own network namespace (iptables needs both: NET_RAW for iptables-legacy's socket,
# which gVisor also requires), then dropped with the uid switch (harness_run.worker._agent_net).
NETWORK_SETUP_CAPABILITIES: Final = ("NET_ADMIN", "NET_RAW")
# Where the worker's network namespace comes from, set by the runtime: "own" (a pod, or a container
# with its own network) — the worker installs the agent's egress rules there, failing closed; "shared"
# (the host's network namespace, e.g. Docker's host network) — the worker never changes it.
AGENT_NETNS_ENV: Final = "HARNESS_RUN_AGENT_NETNS"
WORKSPACE: Final = "/workspace"
CONTAINER_NAME: Final = "agent"

# The in-image worker (``python -m harness_run.worker``): its port and the downward-API volume
# holding the pod's annotations (the claim's token hash arrives there).
WORKER_PORT: Final = 8787
WORKER_PORT_NAME: Final = "worker"
PODINFO_VOLUME: Final = "podinfo"
PODINFO_DIR: Final = "/etc/harness-run/podinfo"


# Per-engine objects (kept across versions) are named ``<engine>-<suffix>`` within 62 characters;
# the engine's Kubernetes service account is its identity for Workload Identity (GCS, Vertex AI).
AGENT_ACCOUNT_SUFFIX: Final = "agent"


def engine_object_name(engine: str, suffix: str) -> str:
    """``<engine>-<suffix>``, the engine name cut so the whole fits in 62 characters."""
    return f"{engine[: 62 - len(suffix)].rstrip('-')}-{suffix}"


def agent_service_account(engine: str) -> str:
    """The Kubernetes service account an engine's sandboxes run as (``<engine>-agent``)."""
    return engine_object_name(engine, AGENT_ACCOUNT_SUFFIX)
