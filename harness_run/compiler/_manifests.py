"""Typed builders of the Kubernetes manifests of one engine version.

Objects (all names and API versions from :mod:`harness_run.vocab.k8s`):

- ``ServiceAccount`` ``<name>-agent`` — one per engine (kept across versions, so a Workload
  Identity binding made once stays valid), annotated with ``gcp_service_account`` when given;
  no token is mounted into the sandbox pods.
- ``SandboxTemplate`` ``<name>-<short digest>`` — the pod: the compiled image, the
  ``runtimeClassName`` (gVisor on GKE), requests = limits from ``spec.resources``, a non-root
  security context, an ``emptyDir`` workspace, the worker's port and readiness probe (``/healthz``),
  the pod's annotations as a downward-API file (the claim's token hash), ``pod_env`` (non-secret:
  the history store URL, Vertex AI settings). No secret, no env injection from claims.
- ``SandboxWarmPool`` ``<name>-<short digest>`` — ``replicas`` = the pool size.
- Egress from ``spec.network``:

  * ``open``: no policy of ours; the template keeps ``networkPolicyManagement: Managed``, so the
    Agent Sandbox controller applies its secure default (cluster network and metadata server
    blocked, public internet allowed).
  * ``none``: ``networkPolicyManagement: Unmanaged`` (the controller's internet-allowing policy
    would otherwise be added to ours: NetworkPolicies only ever add allows); a ``NetworkPolicy``
    denying all egress but what the worker needs by address — DNS (kube-dns, and the metadata
    server's resolver on 169.254.169.254:53 for Cloud DNS clusters) and the GKE metadata server for
    its own Workload Identity (169.254.169.254:80; 169.254.169.252:988 on Dataplane V2) — and a GKE
    ``FQDNNetworkPolicy`` for what it needs by name (:func:`worker_hosts`: the history bucket's
    ``storage.googleapis.com``, the model endpoints, Vertex AI), TCP 443.
  * ``allowlist``: as ``none``, the listed hosts added to the ``FQDNNetworkPolicy`` (TCP 443 and
    80, or the port a host names). Plain NetworkPolicy cannot name hosts; on clusters without GKE
    Dataplane V2 the FQDN policy is not applied and egress degrades to ``none`` (fail closed).

  A pod's policies cannot tell the worker's traffic from the agent's (one network namespace); the
  worker does, with per-uid netfilter rules it installs as root before the uid switch
  (``NET_ADMIN`` + ``NET_RAW``, ``$HARNESS_RUN_AGENT_NETNS=own``; see
  :mod:`harness_run.worker._agent_net`): with ``none`` or an allow-list the agent's processes reach
  loopback only (the model proxy, the worker's egress proxy with the spec's hosts), with ``open``
  everything but the metadata server.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from harness_run.spec import AgentSpec, Network, Resources
from harness_run.vocab import k8s

__all__ = ["ManifestInputs", "build_manifests", "engine_labels", "versioned_name", "worker_hosts"]

Manifest = dict[str, Any]


@dataclass(frozen=True, slots=True)
class ManifestInputs:
    engine: str
    digest: str
    short: str
    image: str
    harnesses: tuple[str, ...]
    resources: Resources
    network: Network
    runtime_class: str | None
    namespace: str
    pool_size: int
    pod_env: tuple[tuple[str, str], ...] = ()
    gcp_service_account: str | None = None
    worker_hosts: tuple[str, ...] = ()
    """Hosts the worker itself needs when egress is not open (see :func:`worker_hosts`)."""


# the model endpoints each harness talks to by default (a spec's model_base_url adds its own)
_MODEL_HOSTS: dict[str, tuple[str, ...]] = {
    "claude-code": ("api.anthropic.com",),
    "codex": ("api.openai.com",),
    "opencode": ("api.anthropic.com", "api.openai.com"),
}
# the metadata server: its resolver (Cloud DNS) and HTTP API, and GKE's on Dataplane V2
_METADATA: tuple[tuple[str, str, int], ...] = (
    ("169.254.169.254/32", "UDP", 53),
    ("169.254.169.254/32", "TCP", 53),
    ("169.254.169.254/32", "TCP", 80),
    ("169.254.169.252/32", "TCP", 988),
)


def worker_hosts(spec: AgentSpec, pod_env: tuple[tuple[str, str], ...]) -> tuple[str, ...]:
    """What the worker reaches by name when the agent's egress is closed: its harnesses' model
    endpoints (and the spec's ``model_base_url``; OpenRouter for ``vendor/model`` ids), the history
    bucket (``HARNESS_RUN_STORE=gs://…``), Vertex AI (``HARNESS_RUN_VERTEX_PROJECT``; global and the
    pod's region). An endpoint passed only per run is not known here: list it in ``network``."""
    hosts: set[str] = set()
    for harness in spec.harnesses:
        hosts.update(_MODEL_HOSTS.get(harness, ()))
    if spec.model_base_url:
        parts = urlsplit(spec.model_base_url)
        if parts.hostname:
            hosts.add(f"{parts.hostname}:{parts.port}" if parts.port else parts.hostname)
    if "/" in spec.model:
        hosts.add("openrouter.ai")
    env = dict(pod_env)
    if env.get("HARNESS_RUN_STORE", "").startswith("gs://"):
        hosts.add("storage.googleapis.com")
    if env.get("HARNESS_RUN_VERTEX_PROJECT"):
        hosts.add("aiplatform.googleapis.com")
        region = env.get("HARNESS_RUN_VERTEX_REGION") or spec.env.get("CLOUD_ML_REGION", "")
        if region and region != "global":
            hosts.add(f"{region}-aiplatform.googleapis.com")
    return tuple(sorted(hosts))


def versioned_name(engine: str, short: str) -> str:
    """``<engine>-<short>``, cut to the 63 characters of a Kubernetes name."""
    return f"{engine[: 62 - len(short)].rstrip('-')}-{short}"


def _engine_object_name(engine: str, suffix: str) -> str:
    return k8s.engine_object_name(engine, suffix)


def engine_labels(engine: str, short: str | None = None) -> dict[str, str]:
    labels = {k8s.LABEL_ENGINE: engine, k8s.LABEL_MANAGED_BY: k8s.MANAGED_BY}
    if short is not None:
        labels[k8s.LABEL_VERSION] = short
    return labels


def _meta(inputs: ManifestInputs, name: str, *, versioned: bool = True) -> dict[str, Any]:
    meta: dict[str, Any] = {
        "name": name,
        "namespace": inputs.namespace,
        "labels": engine_labels(inputs.engine, inputs.short if versioned else None),
    }
    if versioned:
        meta["annotations"] = {
            k8s.ANNOTATION_DIGEST: inputs.digest,
            k8s.ANNOTATION_HARNESSES: ",".join(inputs.harnesses),
        }
    return meta


def _object(kind: k8s.Kind, metadata: dict[str, Any], **body: Any) -> Manifest:
    return {"apiVersion": kind.api_version, "kind": kind.kind, "metadata": metadata, **body}


def service_account(inputs: ManifestInputs) -> Manifest:
    name = _engine_object_name(inputs.engine, "agent")
    meta = _meta(inputs, name, versioned=False)
    if inputs.gcp_service_account:  # GKE Workload Identity: GCS and Vertex AI without keys
        meta["annotations"] = {k8s.WORKLOAD_IDENTITY_ANNOTATION: inputs.gcp_service_account}
    return _object(k8s.SERVICE_ACCOUNT, meta, automountServiceAccountToken=False)


def _pod_spec(inputs: ManifestInputs) -> dict[str, Any]:
    res = inputs.resources
    amounts = {"cpu": res.cpu, "memory": res.memory, "ephemeral-storage": res.ephemeral_storage}
    container: dict[str, Any] = {
        "name": k8s.CONTAINER_NAME,
        "image": inputs.image,
        "imagePullPolicy": "IfNotPresent",
        "resources": {"requests": dict(amounts), "limits": dict(amounts)},
        # the worker starts as root with only these capabilities, confines the agent's uid to
        # loopback (NET_ADMIN, NET_RAW: harness_run.worker._agent_net), becomes AGENT_UID keeping
        # the worker's and runs the agent's processes as AGENT_RUN_UID without any (_privileges)
        "securityContext": {
            "allowPrivilegeEscalation": False,
            "capabilities": {
                "drop": ["ALL"],
                "add": [*k8s.WORKER_CAPABILITIES, *k8s.NETWORK_SETUP_CAPABILITIES],
            },
            "runAsUser": 0,
            "runAsGroup": 0,
            "runAsNonRoot": False,
        },
        "ports": [{"name": k8s.WORKER_PORT_NAME, "containerPort": k8s.WORKER_PORT, "protocol": "TCP"}],
        "readinessProbe": {
            "httpGet": {"path": "/healthz", "port": k8s.WORKER_PORT},
            "periodSeconds": 1,
            "failureThreshold": 3,
            "timeoutSeconds": 1,
        },
        "volumeMounts": [
            {"name": "workspace", "mountPath": k8s.WORKSPACE},
            {"name": k8s.PODINFO_VOLUME, "mountPath": k8s.PODINFO_DIR, "readOnly": True},
        ],
        "workingDir": k8s.WORKSPACE,
    }
    env = [*inputs.pod_env, (k8s.AGENT_UID_ENV, str(k8s.AGENT_RUN_UID)), (k8s.AGENT_NETNS_ENV, "own")]
    container["env"] = [{"name": name, "value": value} for name, value in env]
    spec: dict[str, Any] = {
        "serviceAccountName": _engine_object_name(inputs.engine, "agent"),
        "automountServiceAccountToken": False,
        "containers": [container],
        "securityContext": {
            "runAsNonRoot": True,
            "runAsUser": k8s.AGENT_UID,
            "runAsGroup": k8s.AGENT_UID,
            "fsGroup": k8s.AGENT_UID,
            "seccompProfile": {"type": "RuntimeDefault"},
        },
        "volumes": [
            {"name": "workspace", "emptyDir": {}},
            {
                # the pod's annotations as a file: the claim's token hash reaches the worker here
                "name": k8s.PODINFO_VOLUME,
                "downwardAPI": {
                    "items": [{"path": "annotations", "fieldRef": {"fieldPath": "metadata.annotations"}}]
                },
            },
        ],
    }
    if inputs.runtime_class:
        spec["runtimeClassName"] = inputs.runtime_class
    return spec


def sandbox_template(inputs: ManifestInputs) -> Manifest:
    name = versioned_name(inputs.engine, inputs.short)
    managed = "Managed" if inputs.network.egress == "open" else "Unmanaged"
    body = {
        "podTemplate": {
            "metadata": {"labels": engine_labels(inputs.engine, inputs.short)},
            "spec": _pod_spec(inputs),
        },
        "networkPolicyManagement": managed,
        "envVarsInjectionPolicy": "Disallowed",
    }
    return _object(k8s.SANDBOX_TEMPLATE, _meta(inputs, name), spec=body)


def sandbox_warm_pool(inputs: ManifestInputs) -> Manifest:
    name = versioned_name(inputs.engine, inputs.short)
    body = {"replicas": inputs.pool_size, "sandboxTemplateRef": {"name": name}}
    return _object(k8s.SANDBOX_WARM_POOL, _meta(inputs, name), spec=body)


def _pod_selector(inputs: ManifestInputs) -> dict[str, Any]:
    return {"matchLabels": {k8s.LABEL_ENGINE: inputs.engine, k8s.LABEL_VERSION: inputs.short}}


def egress_network_policy(inputs: ManifestInputs) -> Manifest:
    dns = {
        "to": [
            {
                "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "kube-system"}},
                "podSelector": {"matchLabels": dict(k8s.DNS_POD_LABELS)},
            }
        ],
        "ports": [{"protocol": "UDP", "port": 53}, {"protocol": "TCP", "port": 53}],
    }
    metadata = [
        {"to": [{"ipBlock": {"cidr": cidr}}], "ports": [{"protocol": protocol, "port": port}]}
        for cidr, protocol, port in _METADATA
    ]
    body = {"podSelector": _pod_selector(inputs), "policyTypes": ["Egress"], "egress": [dns, *metadata]}
    name = _engine_object_name(versioned_name(inputs.engine, inputs.short)[:54], "egress")
    return _object(k8s.NETWORK_POLICY, _meta(inputs, name), spec=body)


def fqdn_network_policy(inputs: ManifestInputs) -> Manifest:
    by_port: dict[tuple[int, ...], list[dict[str, str]]] = {}
    wanted = [(h, (443, 80)) for h in inputs.network.allow_hosts]
    wanted += [(h, (443,)) for h in inputs.worker_hosts if h not in inputs.network.allow_hosts]
    for host, default in wanted:
        name, _, port = host.partition(":")
        match = {"pattern": name} if name.startswith("*.") else {"name": name}
        by_port.setdefault((int(port),) if port else default, []).append(match)
    egress = [
        {"matches": matches, "ports": [{"protocol": "TCP", "port": p} for p in ports]}
        for ports, matches in sorted(by_port.items())
    ]
    body = {"podSelector": _pod_selector(inputs), "egress": egress}
    name = _engine_object_name(versioned_name(inputs.engine, inputs.short)[:55], "hosts")
    return _object(k8s.FQDN_NETWORK_POLICY, _meta(inputs, name), spec=body)


def build_manifests(inputs: ManifestInputs) -> tuple[Manifest, ...]:
    """The engine version's objects in apply order (service account first, pool last)."""
    objects = [service_account(inputs)]
    if inputs.network.egress != "open":
        objects.append(egress_network_policy(inputs))
    if inputs.network.egress != "open" and (inputs.network.allow_hosts or inputs.worker_hosts):
        objects.append(fqdn_network_policy(inputs))
    objects += [sandbox_template(inputs), sandbox_warm_pool(inputs)]
    return tuple(objects)
