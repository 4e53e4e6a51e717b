"""Build a :class:`BuildPlan`'s context on a Docker engine (the ``docker`` SDK, imported lazily)."""

from __future__ import annotations

import io
import os
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, cast

from harness_run import telemetry
from harness_run.errors import BuildError, InfrastructureError, UsageError

if TYPE_CHECKING:
    from harness_run.compiler._plan import BuildPlan

__all__ = ["build_image", "docker_client"]

_HOW_TO_START = (
    "start Docker (`sudo systemctl start docker`, or open Docker Desktop) or point DOCKER_HOST at a "
    "running engine; or use isolation='process'"
)


def docker_client(client: Any = None) -> Any:
    """``client``, else ``docker.from_env()``; an engine that does not answer is an
    :class:`InfrastructureError` saying how to start one."""
    try:
        import docker
    except ImportError:
        raise UsageError(
            "isolation='container' needs the docker SDK: pip install 'harness-run[sandbox]'"
        ) from None
    try:
        client = client if client is not None else docker.from_env(timeout=600)
        client.ping()
    except Exception as exc:  # DockerException, or requests' ConnectionError from ping()
        where = os.environ.get("DOCKER_HOST") or "the default socket"
        raise InfrastructureError(
            f"no Docker engine answers at {where} ({exc}); {_HOW_TO_START}", retryable=True
        ) from None
    return client


_TAIL_LINES = 30


@telemetry.traced("harness_run.image.build")
def build_image(
    plan: BuildPlan,
    *,
    client: Any = None,
    tag: str | None = None,
    progress: Callable[[str], None] | None = None,
    timeout: float = 3600,
) -> str:
    """Build ``plan`` and tag it ``tag`` (default ``plan.image``); return the image id (``sha256:…``).

    ``client`` is a ``docker.DockerClient`` (default: ``docker.from_env()``, i.e. ``DOCKER_HOST``).
    Each line of the build log goes to ``progress``. The context is sent as a deterministic tar
    with ``network_mode=plan.network_mode`` and ``plan.build_args``. A failed build raises
    :class:`BuildError` carrying the last lines of the log.
    """
    try:
        import docker
        import docker.errors
    except ImportError:
        raise BuildError("building images needs the docker SDK: pip install 'harness-run[sandbox]'") from None
    if client is None:
        try:
            client = docker.from_env(timeout=int(timeout))
        except docker.errors.DockerException as exc:
            raise BuildError(
                f"no Docker engine reachable ({exc}); start one or set DOCKER_HOST", retryable=True
            ) from None
    tail: deque[str] = deque(maxlen=_TAIL_LINES)
    image_id: str | None = None
    try:
        stream = client.api.build(
            fileobj=io.BytesIO(plan.context_tar()),
            custom_context=True,
            tag=tag or plan.image,
            buildargs=dict(plan.build_args),
            network_mode=plan.network_mode,
            rm=True,
            forcerm=True,
            pull=False,
            decode=True,
            timeout=int(timeout),
        )
        for chunk in stream:
            image_id = _handle(chunk, tail, progress) or image_id
    except docker.errors.DockerException as exc:
        raise BuildError(
            _failure(f"docker build of {plan.image} failed: {exc}", tail), retryable=True
        ) from None
    if image_id is None:
        raise BuildError(_failure(f"docker build of {plan.image} ended without an image id", tail))
    return image_id


def _handle(chunk: dict[str, Any], tail: deque[str], progress: Callable[[str], None] | None) -> str | None:
    if "error" in chunk or "errorDetail" in chunk:
        detail = _mapping(chunk.get("errorDetail"))
        message = str(chunk.get("error") or detail.get("message") or chunk)
        tail.append(message)
        raise BuildError(_failure("docker build failed", tail))
    text = chunk.get("stream")
    if isinstance(text, str):
        for line in text.splitlines():
            tail.append(line)
            if progress is not None:
                progress(line)
    image_id = _mapping(chunk.get("aux")).get("ID")
    return image_id if isinstance(image_id, str) else None


def _mapping(value: object) -> dict[str, object]:
    """``value`` if it is a JSON object (the docker SDK's decoded stream is untyped), else ``{}``."""
    return cast("dict[str, object]", value) if isinstance(value, dict) else {}


def _failure(message: str, tail: deque[str]) -> str:
    log = "\n".join(tail)
    return f"{message}\n--- build log (last lines) ---\n{log}" if log else message
