"""The Agent Sandbox runtime (GKE in production): ``deploy`` compiles, builds, pushes and applies an
engine version; ``get_engine`` looks one up; its sessions claim warm sandboxes through
:class:`ClaimPool` and run turns on the in-image worker
(:class:`~harness_run.runtime.worker_client.WorkerEngine`).

``kubernetes``, ``docker``, ``aiohttp`` and ``google-cloud-storage`` (the ``sandbox`` extra) are
imported only when an engine is deployed or looked up. Users call the facade :mod:`harness_run.sandbox`.
"""

from harness_run.compiler import ImageOptions, PodOptions
from harness_run.runtime.sandbox._cluster import connect as connect_cluster
from harness_run.runtime.sandbox._deploy import (
    default_registry,
    delete_version,
    deploy,
    get_engine,
    publish_image,
)
from harness_run.runtime.sandbox._engine import SandboxEngine
from harness_run.runtime.sandbox._gke import gke_api_client
from harness_run.runtime.sandbox._kube import Kube
from harness_run.runtime.sandbox._options import ClaimOptions, ClusterTarget
from harness_run.runtime.sandbox._progress import Progress

__all__ = [
    "ClaimOptions",
    "ClusterTarget",
    "ImageOptions",
    "Kube",
    "PodOptions",
    "Progress",
    "SandboxEngine",
    "connect_cluster",
    "default_registry",
    "delete_version",
    "deploy",
    "get_engine",
    "gke_api_client",
    "publish_image",
]
