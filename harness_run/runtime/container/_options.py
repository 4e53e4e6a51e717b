""":class:`ContainerOptions`: how local container isolation builds its image and runs its containers
(``local.deploy(spec, isolation="container", container=ContainerOptions(...))``). Frozen, typed and
checked when made, like the sandbox runtime's option objects."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from harness_run.compiler import ImageOptions
from harness_run.errors import UsageError

__all__ = ["ContainerOptions"]


@dataclass(frozen=True, kw_only=True, slots=True)
class ContainerOptions:
    """Container-only options of ``local.deploy(spec, isolation="container", container=...)``.

    - ``image``: :class:`~harness_run.compiler.ImageOptions`, the same object
      :func:`harness_run.sandbox.deploy` takes: ``base_image`` and ``ca_files`` (part of the digest),
      ``build_network`` (default: ``network_mode``) and ``telemetry``. ``registry`` stays ``None``:
      the image is built on the Docker engine and tagged ``harness-run/<spec name>:<short digest>``,
      the name :func:`harness_run.local.get_engine` finds it by.
    - ``network_mode``: the containers' Docker network mode, and the build's unless
      ``image.build_network`` says otherwise. ``"host"`` (default): the worker listens on 127.0.0.1
      only and the agent reaches model servers on this machine's loopback. A spec whose
      ``network`` is not open runs with no network whatever this says.
    - ``labels``: Docker labels added to every container (and used to find them).
    - ``docker_client``: the ``docker.DockerClient`` that builds and runs the containers (default:
      from ``DOCKER_HOST``, else the default socket).
    """

    image: ImageOptions = field(default_factory=ImageOptions)
    network_mode: str = "host"
    labels: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    docker_client: Any = None

    def __post_init__(self) -> None:
        if not isinstance(self.image, ImageOptions):  # pyright: ignore[reportUnnecessaryIsInstance]
            raise UsageError(
                "ContainerOptions.image takes an ImageOptions, e.g. "
                "image=ImageOptions(base_image='python:3.12-slim-bookworm', ca_files=['corp-ca.pem'])"
            )
        if self.image.registry is not None:
            raise UsageError(
                f"ContainerOptions.image.registry is {self.image.registry!r}: local containers run an "
                "image built on the Docker engine, tagged harness-run/<spec name>:<short digest>; leave "
                "registry=None (a registry is for harness_run.sandbox.deploy)"
            )
        if not isinstance(self.network_mode, str) or not self.network_mode.strip():  # pyright: ignore[reportUnnecessaryIsInstance]
            raise UsageError("ContainerOptions.network_mode must name a Docker network mode, e.g. 'host'")
        labels = dict(self.labels)
        bad = [k for k, v in labels.items() if not isinstance(k, str) or not isinstance(v, str)]  # pyright: ignore[reportUnnecessaryIsInstance]
        if bad:
            raise UsageError(f"ContainerOptions.labels maps names to strings; {bad[0]!r} does not")
        object.__setattr__(self, "labels", MappingProxyType(labels))

    @property
    def build_image(self) -> ImageOptions:
        """The image options of the build: ``image`` with ``build_network`` defaulting to
        ``network_mode``."""
        if self.image.build_network is not None:
            return self.image
        return dataclasses.replace(self.image, build_network=self.network_mode)
