"""Where HarnessBox sessions run: the :class:`Provider` protocol and the providers harness-run has.

A provider turns an :class:`~harness_run.AgentSpec` into an :class:`~harness_run.Engine`; every
session of a :class:`~harness_run.harnessbox.HarnessBox` is a session of that engine. ``"local"``
runs the harness CLI on this machine, ``"docker"`` each session in its own container of the
compiled image, ``"agent-sandbox"`` on Kubernetes Agent Sandbox. Add another by implementing
:class:`Provider` and passing an instance as ``HarnessBox(provider=...)``.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from harness_run.errors import UsageError
from harness_run.runtime import Engine
from harness_run.spec import AgentSpec

__all__ = [
    "PROVIDERS",
    "AgentSandboxProvider",
    "DockerProvider",
    "LocalProvider",
    "Provider",
    "provider_for",
]


@runtime_checkable
class Provider(Protocol):
    """Makes the engine a HarnessBox runs its sessions on."""

    name: str
    """The provider's name (``HarnessBox(provider="<name>")`` for the built-in ones)."""

    async def deploy(self, spec: AgentSpec) -> Engine:
        """An engine for ``spec`` (built, pushed or started as the provider needs)."""
        ...


class LocalProvider:
    """The harness CLI as a subprocess on this machine, a workspace folder per session under
    ``workdir`` (default ``$HARNESS_RUN_HOME``)."""

    name = "local"

    def __init__(self, *, workdir: str | Path | None = None, **options: Any) -> None:
        self.workdir = workdir
        self.options = options
        """More ``harness_run.local.deploy`` arguments (``claude_binary=``, …)."""

    async def deploy(self, spec: AgentSpec) -> Engine:
        from harness_run import local

        return await asyncio.to_thread(local.deploy, spec, workdir=self.workdir, **self.options)


class DockerProvider:
    """Each session in its own Docker container of the spec's compiled image (the engine at
    ``DOCKER_HOST``, or ``docker_client``), history in ``workdir``'s store. ``idle_ttl``: seconds a
    session's container is kept without a turn (HarnessBox keeps it for an hour by default, so a
    killed session commits in the container that did the work)."""

    name = "docker"

    def __init__(
        self,
        *,
        workdir: str | Path | None = None,
        base_image: str | None = None,
        docker_client: Any = None,
        ca_files: Sequence[str | Path] = (),
        network_mode: str = "host",
        idle_ttl: float = 3600.0,
        labels: Mapping[str, str] | None = None,
    ) -> None:
        self.workdir = workdir
        self.base_image = base_image
        self.docker_client = docker_client
        self.ca_files = tuple(ca_files)
        self.network_mode = network_mode
        self.idle_ttl = idle_ttl
        self.labels = dict(labels or {})

    async def deploy(self, spec: AgentSpec) -> Engine:
        from harness_run import local

        return await asyncio.to_thread(
            local.deploy,
            spec,
            workdir=self.workdir,
            isolation="container",
            base_image=self.base_image,
            docker_client=self.docker_client,
            ca_files=self.ca_files,
            network_mode=self.network_mode,
            idle_ttl=self.idle_ttl,
            labels=self.labels,
        )


class AgentSandboxProvider:
    """Kubernetes Agent Sandbox (``harness_run.sandbox.deploy``): ``project`` and ``location``
    (default ``$GOOGLE_CLOUD_PROJECT`` and ``$HARNESS_RUN_LOCATION``) plus any other ``deploy``
    argument (``cluster=``, ``image=``, ``store=``, ``claims=``, …)."""

    name = "agent-sandbox"

    def __init__(self, *, project: str | None = None, location: str | None = None, **options: Any) -> None:
        self.project = project or os.environ.get("GOOGLE_CLOUD_PROJECT", "")
        self.location = location or os.environ.get("HARNESS_RUN_LOCATION", "")
        self.options: dict[str, Any] = {"progress": False, **options}

    async def deploy(self, spec: AgentSpec) -> Engine:
        if not self.project or not self.location:
            raise UsageError(
                "provider 'agent-sandbox' needs a GCP project and location: pass "
                "AgentSandboxProvider(project=..., location=...) or set GOOGLE_CLOUD_PROJECT and "
                "HARNESS_RUN_LOCATION"
            )
        from harness_run import sandbox

        return await asyncio.to_thread(
            sandbox.deploy, spec, project=self.project, location=self.location, **self.options
        )


PROVIDERS: dict[str, type[LocalProvider] | type[DockerProvider] | type[AgentSandboxProvider]] = {
    "local": LocalProvider,
    "docker": DockerProvider,
    "agent-sandbox": AgentSandboxProvider,
}
"""The providers offered by name."""

_ELSEWHERE = {"e2b": "E2B", "daytona": "Daytona", "ec2": "EC2", "modal": "Modal"}


def provider_for(provider: str | Provider) -> Provider:
    """``provider`` as a :class:`Provider`: an instance as is, a name of :data:`PROVIDERS` made
    with its defaults; any other name is refused, naming the ones there are."""
    if not isinstance(provider, str):
        if isinstance(provider, Provider):  # pyright: ignore[reportUnnecessaryIsInstance]
            return provider
        raise UsageError(
            f"provider must be a name ({', '.join(map(repr, PROVIDERS))}) or a Provider instance, "
            f"not {type(provider).__name__}"
        )
    made = PROVIDERS.get(provider.strip().lower())
    if made is not None:
        return made()
    known = ", ".join(repr(n) for n in PROVIDERS)
    vendor = _ELSEWHERE.get(provider.strip().lower())
    why = f"{vendor} sandboxes are not offered by harness-run" if vendor else f"unknown provider {provider!r}"
    raise UsageError(
        f"{why}; the providers here are {known} (or pass an object implementing "
        "harness_run.harnessbox.Provider: name and async deploy(spec) -> Engine)"
    )
