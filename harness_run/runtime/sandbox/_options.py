"""The sandbox runtime's option objects: which cluster (:class:`ClusterTarget`) and how sessions use
their sandboxes (:class:`ClaimOptions`). Frozen, typed, checked when made."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness_run.errors import UsageError

__all__ = ["ClaimOptions", "ClusterTarget"]

_CLUSTER_NAME = re.compile(r"[a-z]([-a-z0-9]{0,38}[a-z0-9])?")
_NAMESPACE = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")


@dataclass(frozen=True, kw_only=True, slots=True)
class ClusterTarget:
    """The Kubernetes cluster and namespace an engine is deployed to and claims sandboxes from.

    - ``name``: the GKE cluster's name (e.g. ``"harness-run"``, what ``harness-run-gcp-setup``
      creates). The kubeconfig context of that cluster in the call's project and location is used:
      the one ``gcloud container clusters get-credentials NAME --location LOCATION --project
      PROJECT`` writes (``gke_<project>_<location>_<name>``). Default: ``$HARNESS_RUN_CLUSTER``.
    - ``context``: a kubeconfig context, by name. Its GKE cluster (from the context's or its
      cluster entry's ``gke_<project>_<location>_<cluster>`` name) must be in the call's project and
      location (a zone of the location counts), and be ``name`` when both are given.
    - neither: the kubeconfig's current context, with the same check when it names a GKE cluster.
      A context that names no GKE cluster (a renamed one, kind, minikube…) cannot be checked: it is
      used as it is, and ``deploy`` prints which one it used.
    - ``kubeconfig``: the kubeconfig file (default ``$KUBECONFIG``, else ``~/.kube/config``). Inside
      a pod (``KUBERNETES_SERVICE_HOST`` set, no kubeconfig and no ``context`` named) the pod's own
      cluster is used, through its service account.
    - ``namespace``: where the engine's objects and claims live (default ``"default"``).
    - ``api_client``: a ready ``kubernetes.client.ApiClient`` (tests, custom authentication). It is
      used as given: no kubeconfig is read and nothing is checked, so it excludes ``name``/``context``.

    The cluster is reached only when something needs it: ``sandbox.get_engine()`` connects when a
    turn first claims a sandbox (or a version is deleted), so reading history needs no kubeconfig.
    """

    name: str | None = None
    context: str | None = None
    kubeconfig: str | Path | None = None
    namespace: str = "default"
    api_client: Any = None

    def __post_init__(self) -> None:
        if self.name is not None and not _CLUSTER_NAME.fullmatch(self.name):
            raise UsageError(
                f"ClusterTarget.name {self.name!r} is not a GKE cluster name (lowercase letters, digits "
                "and '-', e.g. 'harness-run'); name a kubeconfig context with context= instead"
            )
        if self.context is not None and not self.context.strip():
            raise UsageError("ClusterTarget.context must name a kubeconfig context")
        if not _NAMESPACE.fullmatch(self.namespace):
            raise UsageError(
                f"ClusterTarget.namespace {self.namespace!r} is not a Kubernetes namespace name "
                "(e.g. 'agents')"
            )
        if self.api_client is not None and (self.name or self.context or self.kubeconfig):
            raise UsageError(
                "ClusterTarget takes either api_client= (used as given) or name=/context=/kubeconfig= "
                "(read from a kubeconfig and checked), not both"
            )

    @classmethod
    def of(cls, cluster: str | ClusterTarget | None) -> ClusterTarget:
        """``cluster=`` as ``deploy``/``get_engine`` take it: a GKE cluster name, a target, or None."""
        if cluster is None:
            return cls()
        if isinstance(cluster, str):
            return cls(name=cluster)
        if not isinstance(cluster, ClusterTarget):  # pyright: ignore[reportUnnecessaryIsInstance]
            raise UsageError(
                f"cluster= takes a GKE cluster name or a ClusterTarget, not {type(cluster).__name__}"
            )
        return cluster


@dataclass(frozen=True, kw_only=True, slots=True)
class ClaimOptions:
    """How this process's sessions use their sandboxes (client-side: nothing here is deployed).

    - ``idle_ttl``: seconds a session keeps its sandbox after a turn, for the next turn or
      ``exec`` (default 60); then it is released and the next turn claims a fresh one and resumes
      from the history store. ``0`` releases it after every turn.
    - ``claim_timeout``: seconds a claim may take to become Ready (default 120) before the turn
      fails with a retryable :class:`~harness_run.errors.InfrastructureError`.
    - ``router_url``: reach the workers through a sandbox router at this URL (the claim's sandbox
      named in ``X-Sandbox-ID``) instead of at their pod IPs, e.g. from outside the cluster.
    - ``pool_after``: branch pooling, as ``local.deploy(pool_after=)`` (default 60 s). A new session
      on a (remote, branch) takes over the sandbox of an idle session of this process on the same
      (remote, branch) — no turn running, its last change at least ``pool_after`` seconds old, no
      ``on_close`` work pending — and its workspace in it (no clone, when the worker finds the
      checkout clean and pushed). Such a sandbox is kept ``pool_after + idle_ttl`` seconds after
      its last turn. The earlier session's next turn restores its checkpoint in a new sandbox.
    """

    idle_ttl: float = 60.0
    claim_timeout: float = 120.0
    router_url: str | None = None
    pool_after: float = 60.0

    def __post_init__(self) -> None:
        if not math.isfinite(self.idle_ttl) or self.idle_ttl < 0:
            raise UsageError(f"ClaimOptions.idle_ttl must be seconds >= 0, not {self.idle_ttl!r}")
        if not math.isfinite(self.pool_after) or self.pool_after < 0:
            raise UsageError(f"ClaimOptions.pool_after must be seconds >= 0, not {self.pool_after!r}")
        if not math.isfinite(self.claim_timeout) or self.claim_timeout <= 0:
            raise UsageError(f"ClaimOptions.claim_timeout must be seconds > 0, not {self.claim_timeout!r}")
        if self.router_url is not None and not self.router_url.startswith(("http://", "https://")):
            raise UsageError(
                f"ClaimOptions.router_url {self.router_url!r} must be an http(s) URL, e.g. "
                "'http://sandbox-router.agents.svc:8080'"
            )
