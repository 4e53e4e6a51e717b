"""Run agents on Kubernetes Agent Sandbox (GKE in production): ``deploy`` from CI, ``get_engine`` from
applications, then the same ``start_session().run(prompt)`` as the local runtime.

``kubernetes``, ``docker``, ``aiohttp`` and ``google-cloud-storage`` (the ``sandbox`` extra) are
imported only when an engine is deployed or looked up.
"""

from harness_run.sandbox._deploy import deploy, get_engine
from harness_run.sandbox._engine import SandboxEngine

__all__ = ["SandboxEngine", "deploy", "get_engine"]
