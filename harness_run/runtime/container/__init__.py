"""Local container isolation: each session in a container of the compiled image, driven through the
in-image worker exactly like the Agent Sandbox runtime (``local.deploy(spec, isolation="container")``).

The ``docker`` SDK (and ``aiohttp``, for the worker client) are imported only when a container
engine is deployed or used.
"""

from harness_run.runtime.container._engine import (
    ContainerEngine,
    deploy_container,
    docker_client,
    engine_for,
    share_store,
)
from harness_run.runtime.container._options import ContainerOptions
from harness_run.runtime.container._pool import ContainerPool

__all__ = [
    "ContainerEngine",
    "ContainerOptions",
    "ContainerPool",
    "deploy_container",
    "docker_client",
    "engine_for",
    "share_store",
]
