"""Run agents on Kubernetes Agent Sandbox (GKE in production): ``deploy`` from CI, ``get_engine`` from
applications, then the same ``start_session().run(prompt)`` as the local runtime.

Beyond ``project``/``location``/``warm_pool``, the knobs come grouped in option objects:
:class:`ClusterTarget` (which cluster and namespace; ``cluster="NAME"`` for short),
:class:`ImageOptions` (base image, CA files, build network, registry), :class:`PodOptions` (runtime
class, Google service account, extra pod env) and :class:`ClaimOptions` (idle TTL, claim timeout,
router URL).

``kubernetes``, ``docker``, ``aiohttp`` and ``google-cloud-storage`` (the ``sandbox`` extra) are
imported only when an engine is deployed or looked up. The implementation is
:mod:`harness_run.runtime.sandbox`; this module is its facade.
"""

from harness_run.runtime.sandbox import (
    ClaimOptions,
    ClusterTarget,
    ImageOptions,
    PodOptions,
    SandboxEngine,
    delete_version,
    deploy,
    get_engine,
)

__all__ = [
    "ClaimOptions",
    "ClusterTarget",
    "ImageOptions",
    "PodOptions",
    "SandboxEngine",
    "delete_version",
    "deploy",
    "get_engine",
]
