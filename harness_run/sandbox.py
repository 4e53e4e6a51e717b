"""Run agents on Kubernetes Agent Sandbox (GKE in production): ``deploy`` from CI, ``get_engine`` from
applications, then the same ``start_session().run(prompt)`` as the local runtime.

``kubernetes``, ``docker``, ``aiohttp`` and ``google-cloud-storage`` (the ``sandbox`` extra) are
imported only when an engine is deployed or looked up. The implementation is
:mod:`harness_run.runtime.sandbox`; this module is its facade.
"""

from harness_run.runtime.sandbox import SandboxEngine, delete_version, deploy, get_engine

__all__ = ["SandboxEngine", "delete_version", "deploy", "get_engine"]
