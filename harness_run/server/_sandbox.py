"""Serving sandbox engines: the cluster the server claims sandboxes on.

``harness-run serve --project P --location L [--cluster NAME | --context CONTEXT] [--namespace NS]
[--router-url URL]`` names it the way the library's ``sandbox.get_engine(project=, location=,
cluster=)`` does (:class:`~harness_run.runtime.sandbox.ClusterTarget`): the kubeconfig from
``$KUBECONFIG`` (else ``~/.kube/config``; the pod's own cluster inside one), the context of GKE
cluster ``NAME`` in ``P``/``L``, or the named or current context, checked against ``P``/``L``.
With ``--cluster NAME`` and no kubeconfig at all (a Cloud Run instance), the cluster is looked up
through the GKE API with Application Default Credentials
(:func:`~harness_run.runtime.sandbox._gke.gke_api_client`). Each flag has an environment default
(how ``serve deploy`` hands them to the Cloud Run service).

Without ``--project``/``--location`` the store's sandbox engines are skipped with a log line naming
the flags (other engines are still served); with them, a cluster that cannot be reached from the
kubeconfig is an error at start-up.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness_run.errors import UsageError

__all__ = ["ENV_LOCATION", "ENV_NAMESPACE", "ENV_PROJECT", "ENV_ROUTER_URL", "SandboxAccess"]

ENV_PROJECT = "GOOGLE_CLOUD_PROJECT"
ENV_LOCATION = "HARNESS_RUN_LOCATION"
ENV_CLUSTER = "HARNESS_RUN_CLUSTER"
ENV_NAMESPACE = "HARNESS_RUN_NAMESPACE"
ENV_ROUTER_URL = "HARNESS_RUN_ROUTER_URL"

FLAGS = "--project and --location (and --cluster NAME or --context CONTEXT)"


@dataclass(frozen=True, kw_only=True, slots=True)
class SandboxAccess:
    """Where the server's sandbox engines claim sandboxes (see the module doc).

    ``project``/``location``: the GCP project and region the cluster must be in (both, or neither:
    then sandbox engines are not served). ``cluster``: the GKE cluster's name; ``context``: a
    kubeconfig context (give one or neither: the current context). ``namespace``: where the engines
    were deployed. ``router_url``: reach the workers through a sandbox router (a server outside the
    cluster, e.g. on Cloud Run). ``api_client``: a ready ``kubernetes.client.ApiClient`` (embedding,
    tests), used as given."""

    project: str | None = None
    location: str | None = None
    cluster: str | None = None
    context: str | None = None
    namespace: str = "default"
    router_url: str | None = None
    api_client: Any = None

    @classmethod
    def from_env(
        cls,
        *,
        project: str | None = None,
        location: str | None = None,
        cluster: str | None = None,
        context: str | None = None,
        namespace: str | None = None,
        router_url: str | None = None,
    ) -> SandboxAccess:
        """The flags, each defaulting to its environment variable (``GOOGLE_CLOUD_PROJECT``,
        ``HARNESS_RUN_LOCATION``, ``HARNESS_RUN_CLUSTER``, ``HARNESS_RUN_NAMESPACE``,
        ``HARNESS_RUN_ROUTER_URL``)."""

        def pick(value: str | None, env: str) -> str | None:
            return value or os.environ.get(env) or None

        return cls(
            project=pick(project, ENV_PROJECT),
            location=pick(location, ENV_LOCATION),
            cluster=None if context else pick(cluster, ENV_CLUSTER),
            context=context or None,
            namespace=pick(namespace, ENV_NAMESPACE) or "default",
            router_url=pick(router_url, ENV_ROUTER_URL),
        )

    @property
    def given(self) -> bool:
        """Whether the server was told the project and location (sandbox engines are served)."""
        return bool(self.project and self.location)

    def check(self) -> None:
        """Refuse half-given settings, naming the flag (before anything is served)."""
        if bool(self.project) != bool(self.location):
            missing = "--location" if self.project else "--project"
            raise UsageError(
                f"harness-run serve: {missing} is missing; sandbox engines need both --project and "
                "--location (the GCP project and region of their cluster), e.g. --project my-project "
                "--location us-central1"
            )
        if not self.given and (self.cluster or self.context):
            raise UsageError(
                "harness-run serve: --cluster/--context name a cluster in a project and location; also "
                "pass --project and --location"
            )
        if self.cluster and self.context:
            raise UsageError(
                "harness-run serve: pass --cluster NAME (a GKE cluster) or --context CONTEXT (a "
                "kubeconfig context), not both"
            )

    def kube(self) -> Any:
        """The :class:`~harness_run.runtime.sandbox._kube.Kube` for the cluster (reads the
        kubeconfig now; talks to no server); a :class:`UsageError` naming the flags if it fails."""
        from harness_run.runtime.sandbox import ClusterTarget, Kube, connect_cluster, gke_api_client

        project, location = self.project or "", self.location or ""
        if self._from_gke_api():
            api_client = gke_api_client(project, location, self.cluster or "")
            return Kube(api_client, self.namespace)
        try:
            target = ClusterTarget(
                name=None if self.api_client is not None else self.cluster,
                context=None if self.api_client is not None else self.context,
                namespace=self.namespace,
                api_client=self.api_client,
            )
            connection = connect_cluster(
                target, project=project, location=location, caller="harness-run serve"
            )
        except UsageError as exc:
            raise UsageError(
                f"harness-run serve cannot reach the sandbox engines' cluster (--project {self.project} "
                f"--location {self.location}{self._which()}): {_as_flags(str(exc))}"
            ) from None
        return Kube(connection.api_client, self.namespace)

    def _from_gke_api(self) -> bool:
        """A GKE cluster named, and no kubeconfig (nor a pod's own cluster) to find it in."""
        if self.api_client is not None or not self.cluster or self.context:
            return False
        if os.environ.get("KUBECONFIG") or os.environ.get("KUBERNETES_SERVICE_HOST"):
            return False
        return not Path("~/.kube/config").expanduser().is_file()  # fresh-machine ok: kubectl's default

    def _which(self) -> str:
        if self.context:
            return f" --context {self.context}"
        return f" --cluster {self.cluster}" if self.cluster else " and the current kubeconfig context"

    def env(self) -> dict[str, str]:
        """The settings as the environment ``harness-run serve`` reads (for a Cloud Run service)."""
        pairs = {
            ENV_PROJECT: self.project,
            ENV_LOCATION: self.location,
            ENV_CLUSTER: self.cluster,
            ENV_NAMESPACE: self.namespace if self.namespace != "default" else None,
            ENV_ROUTER_URL: self.router_url,
        }
        return {name: value for name, value in pairs.items() if value}


_LIBRARY_TO_FLAGS = (
    ("cluster=ClusterTarget(kubeconfig=...)", "set KUBECONFIG"),
    ("cluster=ClusterTarget(context=...)", "--context CONTEXT"),
    ("cluster='NAME'", "--cluster NAME"),
    ("project=/location=", "--project/--location"),
)


def _as_flags(message: str) -> str:
    """The cluster lookup's hints (written for the library's arguments) in terms of serve's flags."""
    for library, flag in _LIBRARY_TO_FLAGS:
        message = message.replace(library, flag)
    return message
