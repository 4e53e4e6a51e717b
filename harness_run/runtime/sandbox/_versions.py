"""Engine versions on the cluster: find a version's record by digest prefix, delete its objects."""

from __future__ import annotations

from harness_run.compiler import SHORT_DIGEST_LEN, engine_labels, versioned_name
from harness_run.errors import UsageError
from harness_run.runtime.sandbox._kube import Kube, KubeStatus
from harness_run.store import EngineRecord, HistoryStore
from harness_run.vocab import k8s

__all__ = ["RUNTIME", "delete_version", "find_version"]

RUNTIME = "sandbox"


def find_version(history: HistoryStore, name: str, version: str | None) -> EngineRecord | None:
    found = [e for e in history.list_engines(name) if e.runtime == RUNTIME]
    if version:
        found = [e for e in found if e.version.startswith(version)]
        if len({e.version for e in found}) > 1:
            raise UsageError(
                f"version prefix {version!r} of engine {name!r} is ambiguous "
                f"({sorted(e.version[:SHORT_DIGEST_LEN] for e in found)}); give more characters"
            )
    return max(found, key=lambda e: e.created_at) if found else None


def delete_version(history: HistoryStore, kube: Kube, name: str, version: str) -> EngineRecord:
    """Delete a version's pool, template and policies (not the engine's ServiceAccount) and record."""
    record = find_version(history, name, version)
    if record is None:
        raise UsageError(f"engine {name!r} has no version {version!r}; see engine.versions()")
    short = record.version[:SHORT_DIGEST_LEN]
    base = versioned_name(name, short)
    targets = [
        (k8s.SANDBOX_WARM_POOL, base),
        (k8s.SANDBOX_TEMPLATE, base),
        (k8s.NETWORK_POLICY, _suffixed(base[:54], "egress")),
        (k8s.FQDN_NETWORK_POLICY, _suffixed(base[:55], "hosts")),
    ]
    for claim in kube.list(k8s.SANDBOX_CLAIM, engine_labels(name, short)):
        kube.delete(k8s.SANDBOX_CLAIM, str(claim["metadata"]["name"]))
    for kind, obj_name in targets:
        try:
            kube.delete(kind, obj_name)
        except KubeStatus as exc:
            if exc.status != 404:  # e.g. a cluster without GKE's FQDNNetworkPolicy
                raise
    history.delete_engine(name, record.version)
    return record


def _suffixed(base: str, suffix: str) -> str:
    return f"{base[: 62 - len(suffix)].rstrip('-')}-{suffix}"
