"""Which cluster a deploy or lookup talks to: the kubeconfig context of a :class:`ClusterTarget`,
checked against the call's project and location, and the Kubernetes client for it.

GKE names the contexts (and cluster entries) that ``gcloud container clusters get-credentials``
writes ``gke_<project>_<location>_<cluster>``; neither part can hold ``_``, so the name says which
cluster a context reaches. A context whose GKE cluster is in another project or location than the
call's is refused with both named, instead of deploying to (or claiming from) the wrong cluster.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, cast

from harness_run.errors import UsageError
from harness_run.runtime.sandbox._options import ClusterTarget

__all__ = ["ENV_CLUSTER", "Connection", "GkeCluster", "KubeContext", "choose_context", "connect"]

ENV_CLUSTER = "HARNESS_RUN_CLUSTER"
_ZONE_SUFFIX = re.compile(r"-[a-z]")


@dataclass(frozen=True, slots=True)
class GkeCluster:
    """A GKE cluster as a kubeconfig names it."""

    project: str
    location: str
    name: str

    @classmethod
    def parse(cls, text: str) -> GkeCluster | None:
        parts = text.split("_")
        if len(parts) != 4 or parts[0] != "gke" or not all(parts[1:]):
            return None
        return cls(project=parts[1], location=parts[2], name=parts[3])

    def is_in(self, project: str, location: str) -> bool:
        """In ``project`` at ``location``: the same location, or a zone of that region."""
        if self.project != project:
            return False
        zone = self.location.removeprefix(location)
        return zone == "" or (zone != self.location and bool(_ZONE_SUFFIX.fullmatch(zone)))

    def __str__(self) -> str:
        return f"GKE cluster {self.name!r} in project {self.project!r}, location {self.location!r}"


@dataclass(frozen=True, slots=True)
class KubeContext:
    """A kubeconfig context: its name and the name of its cluster entry."""

    name: str
    cluster: str = ""

    @property
    def gke(self) -> GkeCluster | None:
        return GkeCluster.parse(self.name) or GkeCluster.parse(self.cluster)


@dataclass(frozen=True, slots=True)
class Connection:
    """A Kubernetes client and how it was chosen (for progress lines and errors)."""

    api_client: Any
    source: str


def choose_context(
    contexts: Sequence[KubeContext],
    current: str | None,
    *,
    name: str | None,
    context: str | None,
    project: str,
    location: str,
    kubeconfig: str,
    caller: str,
) -> KubeContext:
    """The context to use (see :class:`ClusterTarget`); a :class:`UsageError` naming both sides when
    it reaches a GKE cluster other than the one asked for."""
    by_name = {c.name: c for c in contexts}
    known = ", ".join(sorted(by_name)) or "none"
    asked = f"project {project!r}, location {location!r}" + (f", cluster {name!r}" if name else "")
    if context is not None:
        chosen = by_name.get(context)
        if chosen is None:
            raise UsageError(f"kubeconfig {kubeconfig} has no context {context!r} (contexts: {known})")
        _check(chosen, name=name, project=project, location=location, asked=asked, caller=caller, how="")
        return chosen
    if name is not None:
        matches = [
            c for c in contexts if (g := c.gke) is not None and g.name == name and g.is_in(project, location)
        ]
        if not matches:
            raise UsageError(
                f"kubeconfig {kubeconfig} has no context for GKE cluster {name!r} in project {project!r}, "
                f"location {location!r} (contexts: {known}); run `gcloud container clusters get-credentials "
                f"{name} --location {location} --project {project}`, or name the context with "
                "cluster=ClusterTarget(context=...)"
            )
        exact = f"gke_{project}_{location}_{name}"
        return next(
            (c for c in matches if c.name == current),
            next((c for c in matches if c.name == exact), matches[0]),
        )
    chosen = by_name.get(current) if current else None
    if chosen is None:
        raise UsageError(
            f"kubeconfig {kubeconfig} has no current context; name the cluster with cluster='NAME' "
            "(its GKE cluster name) or cluster=ClusterTarget(context=...), or run `kubectl config "
            "use-context CONTEXT`"
        )
    how = " current"
    _check(chosen, name=None, project=project, location=location, asked=asked, caller=caller, how=how)
    return chosen


def _check(
    chosen: KubeContext, *, name: str | None, project: str, location: str, asked: str, caller: str, how: str
) -> None:
    gke = chosen.gke
    if gke is None:
        if name is not None:
            raise UsageError(
                f"the kubeconfig context {chosen.name!r} names no GKE cluster (gke_<project>_<location>_"
                f"<cluster>), so it cannot be checked to be cluster {name!r}; pass either the context or "
                "the cluster name, not both"
            )
        return  # not a GKE context: nothing to check it against
    if gke.is_in(project, location) and (name is None or gke.name == name):
        return
    raise UsageError(
        f"the{how} kubeconfig context {chosen.name!r} is {gke}, but {caller} was asked for {asked}; "
        f"pass the matching project=/location=, switch with `kubectl config use-context`, or name the "
        "cluster: cluster='NAME' or cluster=ClusterTarget(context=...)"
    )


def read_kubeconfig(paths: str) -> tuple[list[KubeContext], str | None]:
    """The contexts and current context of a kubeconfig path list (``$KUBECONFIG`` syntax), merged
    as kubectl does: the first file naming a context or a current context wins."""
    import yaml

    contexts: dict[str, KubeContext] = {}
    current: str | None = None
    found = False
    for part in paths.split(os.pathsep):
        path = Path(part).expanduser() if part else None
        if path is None or not path.is_file():
            continue
        found = True
        try:
            raw: object = yaml.safe_load(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
            raise UsageError(f"cannot read kubeconfig {path}: {exc}") from None
        doc = _mapping(raw)
        for entry in _list(doc.get("contexts")):
            item = _mapping(entry)
            ctx_name = item.get("name")
            if isinstance(ctx_name, str) and ctx_name not in contexts:
                cluster = _mapping(item.get("context")).get("cluster")
                contexts[ctx_name] = KubeContext(ctx_name, cluster if isinstance(cluster, str) else "")
        value = doc.get("current-context")
        if current is None and isinstance(value, str) and value:
            current = value
    if not found:
        raise UsageError(
            f"no kubeconfig at {paths}; run `gcloud container clusters get-credentials CLUSTER "
            "--location LOCATION --project PROJECT`, set KUBECONFIG, or pass "
            "cluster=ClusterTarget(kubeconfig=...)"
        )
    return list(contexts.values()), current


def connect(target: ClusterTarget, *, project: str, location: str, caller: str) -> Connection:
    """The Kubernetes client of ``target`` for a call on ``project``/``location`` (see
    :class:`ClusterTarget`). Reads the kubeconfig; talks to no server."""
    if target.api_client is not None:
        return Connection(target.api_client, "the given api_client")
    name = target.name or os.environ.get(ENV_CLUSTER) or None
    env_config = os.environ.get("KUBECONFIG") or None
    try:
        from kubernetes import client
        from kubernetes import config as kube_config
    except ImportError:
        raise UsageError(
            "the sandbox runtime needs the kubernetes client: pip install 'harness-run[sandbox]'"
        ) from None
    if (
        os.environ.get("KUBERNETES_SERVICE_HOST")
        and target.kubeconfig is None
        and env_config is None
        and target.context is None
    ):
        config = cast("_KubeConfigModule", kube_config)
        try:
            config.load_incluster_config()
        except Exception as exc:
            raise UsageError(f"cannot use the pod's in-cluster Kubernetes config ({exc})") from None
        return Connection(client.ApiClient(), "the in-cluster config")
    default = "~/.kube/config"  # fresh-machine ok: kubectl's documented default, read only if present
    paths = str(target.kubeconfig) if target.kubeconfig is not None else env_config or default
    contexts, current = read_kubeconfig(paths)
    chosen = choose_context(
        contexts,
        current,
        name=name,
        context=target.context,
        project=project,
        location=location,
        kubeconfig=paths,
        caller=caller,
    )
    try:
        api_client = cast("_KubeConfigModule", kube_config).new_client_from_config(
            config_file=paths, context=chosen.name, persist_config=False
        )
    except Exception as exc:
        raise UsageError(
            f"cannot load kubeconfig context {chosen.name!r} from {paths} ({exc}); re-run `gcloud "
            "container clusters get-credentials`"
        ) from None
    return Connection(api_client, f"context {chosen.name!r}")


class _KubeConfigModule(Protocol):
    """What is used of ``kubernetes.config`` (untyped upstream)."""

    def load_incluster_config(self) -> None: ...

    def new_client_from_config(
        self, config_file: str | None = None, context: str | None = None, persist_config: bool = True
    ) -> Any: ...


def _mapping(value: object) -> Mapping[str, object]:
    return cast("Mapping[str, object]", value) if isinstance(value, dict) else {}


def _list(value: object) -> list[object]:
    return cast("list[object]", value) if isinstance(value, list) else []
