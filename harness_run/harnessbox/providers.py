"""Where HarnessBox sessions run: the :class:`Provider` protocol and the providers harness-run has.

A provider turns an :class:`~harness_run.AgentSpec` into an :class:`~harness_run.Engine`; every
session of a :class:`~harness_run.harnessbox.HarnessBox` is a session of that engine. ``"local"``
runs the harness CLI on this machine, ``"docker"`` each session in its own container of the
compiled image, ``"agent-sandbox"`` on Kubernetes Agent Sandbox. Add another without writing an
engine: implement :class:`harness_run.providers.SandboxSource` (a store and a
:class:`~harness_run.providers.SandboxProvider`, see docs/providers.md) and pass an instance as
``HarnessBox(provider=...)``; or implement :class:`Provider` (a whole engine).
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from harness_run.errors import UsageError
from harness_run.providers import SandboxSource, deploy_on
from harness_run.runtime import Engine
from harness_run.spec import AgentSpec
from harness_run.vocab.pins import DEFAULT_BASE_IMAGE

__all__ = [
    "NETWORK_ENFORCING",
    "PROVIDERS",
    "AgentSandboxProvider",
    "DockerProvider",
    "LocalProvider",
    "Provider",
    "SandboxSourceProvider",
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
    enforces_network = False

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
    killed session commits in the container that did the work). ``pool_after``: a new session on a
    (remote, branch) takes over an earlier session's idle workspace once it has been idle this many
    seconds (HarnessBox's branch-based pooling; see docs/workspaces.md). ``deny_network`` is enforced
    (the container has no network; the model goes through an egress proxy)."""

    name = "docker"
    enforces_network = True

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
        pool_after: float = 60.0,
    ) -> None:
        if not pool_after >= 0:
            raise UsageError(
                f"DockerProvider(pool_after={pool_after!r}): give seconds >= 0 (0: as soon as idle)"
            )
        self.workdir = workdir
        self.pool_after = pool_after
        self.base_image = base_image
        self.docker_client = docker_client
        self.ca_files = tuple(ca_files)
        self.network_mode = network_mode
        self.idle_ttl = idle_ttl
        self.labels = dict(labels or {})

    async def deploy(self, spec: AgentSpec) -> Engine:
        from harness_run import local

        image = local.ImageOptions(base_image=self.base_image or DEFAULT_BASE_IMAGE, ca_files=self.ca_files)
        container = local.ContainerOptions(
            image=image, network_mode=self.network_mode, labels=self.labels, docker_client=self.docker_client
        )
        return await asyncio.to_thread(
            local.deploy,
            spec,
            workdir=self.workdir,
            isolation="container",
            container=container,
            idle_ttl=self.idle_ttl,
            pool_after=self.pool_after,
        )


class AgentSandboxProvider:
    """Kubernetes Agent Sandbox (``harness_run.sandbox.deploy``): ``project`` and ``location``
    (default ``$GOOGLE_CLOUD_PROJECT`` and ``$HARNESS_RUN_LOCATION``) plus any other ``deploy``
    argument (``cluster=``, ``image=``, ``store=``, ``claims=``, …)."""

    name = "agent-sandbox"
    enforces_network = True

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


class SandboxSourceProvider:
    """A :class:`~harness_run.providers.SandboxSource` as a :class:`Provider`: the engine is
    :func:`harness_run.providers.deploy_on` (harness-run's worker engine over its sandboxes)."""

    def __init__(self, source: SandboxSource) -> None:
        self.source = source
        self.name = source.name
        self.enforces_network = bool(getattr(source, "enforces_network", False))

    async def deploy(self, spec: AgentSpec) -> Engine:
        return await deploy_on(self.source, spec)


PROVIDERS: dict[str, type[LocalProvider] | type[DockerProvider] | type[AgentSandboxProvider]] = {
    "local": LocalProvider,
    "docker": DockerProvider,
    "agent-sandbox": AgentSandboxProvider,
}
"""The providers offered by name."""

NETWORK_ENFORCING = ("docker", "agent-sandbox")
"""The built-in providers that enforce ``SecurityPolicy(deny_network=True)`` (no network at all)."""

_ELSEWHERE = {"daytona": "Daytona", "ec2": "EC2", "modal": "Modal", "e2b": "E2B"}
_PORT_HINT = (
    "write a provider for it on harness-run's SandboxProvider port (harness_run.providers, about 100 "
    "lines: see docs/providers.md) and pass an instance as HarnessBox(provider=...)"
)


def provider_for(provider: str | Provider | SandboxSource) -> Provider:
    """``provider`` as a :class:`Provider`: an instance as is, a
    :class:`~harness_run.providers.SandboxSource` wrapped in :class:`SandboxSourceProvider`, a name
    of :data:`PROVIDERS` made with its defaults; any other name is refused, naming the ones there
    are and the provider port."""
    if not isinstance(provider, str):
        if isinstance(provider, Provider):
            return provider
        if isinstance(provider, SandboxSource):  # pyright: ignore[reportUnnecessaryIsInstance]
            return SandboxSourceProvider(provider)
        raise UsageError(
            f"provider must be a name ({', '.join(map(repr, PROVIDERS))}), a Provider or a "
            f"harness_run.providers.SandboxSource, not {type(provider).__name__}"
        )
    key = provider.strip().lower()
    made = PROVIDERS.get(key)
    if made is not None:
        return made()
    known = ", ".join(repr(n) for n in PROVIDERS)
    vendor = _ELSEWHERE.get(key)
    why = f"{vendor} sandboxes are not built into harness-run" if vendor else f"unknown provider {provider!r}"
    raise UsageError(f"{why}; the providers here are {known}, or {_PORT_HINT}")


# provider="daytona" (the SDK is imported on deploy: pip install "harness-run[daytona]")
from harness_run.runtime.daytona import DaytonaProvider as DaytonaProvider  # noqa: E402

PROVIDERS["daytona"] = DaytonaProvider  # pyright: ignore[reportArgumentType]

# provider="e2b" (the SDK is imported on deploy: pip install "harness-run[e2b]")
from harness_run.runtime.e2b import E2BProvider as E2BProvider  # noqa: E402

PROVIDERS["e2b"] = E2BProvider  # pyright: ignore[reportArgumentType]
