"""The compiler's option objects: what goes into the image (:class:`ImageOptions`) and how the
engine's pods run (:class:`PodOptions`). Frozen, typed and checked when made, so a bad value fails
where it is written, not halfway through a deploy.

Only ``ImageOptions.base_image`` and ``ImageOptions.ca_files`` reach the image and so the digest;
every other field shapes the manifests or the build, never the engine version.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType

from harness_run.errors import UsageError
from harness_run.spec import looks_like_credential
from harness_run.vocab.pins import DEFAULT_BASE_IMAGE

__all__ = ["ImageOptions", "PodOptions"]

_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_GSA = re.compile(r"[a-z0-9][a-z0-9._-]*@[a-z0-9][a-z0-9.-]*\.gserviceaccount\.com")
_SECRET_WORDS = re.compile(r"(^|_)(KEY|TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIALS?|AUTH)(_|$)")
_REGISTRY = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:/-]*")


@dataclass(frozen=True, kw_only=True, slots=True)
class ImageOptions:
    """How the agent image is made and where it goes.

    - ``base_image``: the image to build on (Debian-based, with ``python3`` and ``python3-venv``).
      Part of the digest.
    - ``ca_files``: extra CA certificates (PEM files) trusted by the build steps and inside the
      image. Part of the digest (their content, not their paths).
    - ``build_network``: the Docker network mode of the build (e.g. ``"host"``).
    - ``registry``: where the image is pushed: it is tagged ``<registry>/<spec name>:<short digest>``.
      ``None``: ``harness-run`` for :func:`~harness_run.compiler.compile`; for
      :func:`harness_run.sandbox.deploy`, ``$HARNESS_RUN_REGISTRY`` or the project's Artifact
      Registry repository ``<location>-docker.pkg.dev/<project>/harness-run``.
    - ``telemetry``: install the OpenTelemetry SDK and OTLP exporter (the ``otel`` extra) so the
      worker exports spans, configured by ``OTEL_*`` variables in ``PodOptions.env``. Part of the
      digest when True (images without it are unchanged).
    """

    base_image: str = DEFAULT_BASE_IMAGE
    ca_files: Sequence[str | Path] = ()
    build_network: str | None = None
    registry: str | None = None
    telemetry: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.base_image, str) or not self.base_image.strip():  # pyright: ignore[reportUnnecessaryIsInstance]
            raise UsageError("ImageOptions.base_image must name an image, e.g. 'python:3.12-slim-bookworm'")
        if isinstance(self.ca_files, str | Path):
            raise UsageError("ImageOptions.ca_files takes a list of PEM files, e.g. ca_files=['corp-ca.pem']")
        object.__setattr__(self, "ca_files", tuple(self.ca_files))
        if self.registry is not None:
            registry = self.registry.rstrip("/")
            if "://" in registry or not _REGISTRY.fullmatch(registry):
                raise UsageError(
                    f"ImageOptions.registry {self.registry!r} is not an image repository prefix; use "
                    "e.g. 'us-central1-docker.pkg.dev/my-project/harness-run' or '127.0.0.1:5000/agents'"
                )
            object.__setattr__(self, "registry", registry)

    def repository(self, engine: str) -> str:
        """The image repository of engine ``engine`` (without the tag)."""
        return f"{self.registry or 'harness-run'}/{engine}"


@dataclass(frozen=True, kw_only=True, slots=True)
class PodOptions:
    """How the engine's sandbox pods run (the SandboxTemplate and ServiceAccount); never in the digest.

    - ``runtime_class``: the pods' ``runtimeClassName``: ``"gvisor"`` (GKE Sandbox) by default,
      ``None`` for the cluster's default runtime.
    - ``gcp_service_account``: a Google service account the pods act as (the GKE Workload Identity
      annotation on the engine's ServiceAccount), e.g. ``agents@my-project.iam.gserviceaccount.com``.
      ``None``: the pods act as their Kubernetes ServiceAccount (what ``harness-run-gcp-setup``
      grants the namespace).
    - ``env``: non-secret environment of the sandbox container. Names that look like credentials
      and credential-looking values are refused: secrets travel with each run, never in a manifest.
      :func:`harness_run.sandbox.deploy` adds the worker's own settings (``HARNESS_RUN_STORE``,
      ``HARNESS_RUN_VERTEX_PROJECT`` and, when the spec names one, ``HARNESS_RUN_VERTEX_REGION``).
    """

    runtime_class: str | None = "gvisor"
    gcp_service_account: str | None = None
    env: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))

    def __post_init__(self) -> None:
        if self.runtime_class is not None and not self.runtime_class.strip():
            raise UsageError("PodOptions.runtime_class must name a RuntimeClass, or be None for the default")
        gsa = self.gcp_service_account
        if gsa is not None and not _GSA.fullmatch(gsa):
            raise UsageError(
                f"PodOptions.gcp_service_account {gsa!r} is not a Google service account email; "
                "use e.g. 'agents@my-project.iam.gserviceaccount.com'"
            )
        object.__setattr__(self, "env", MappingProxyType(dict(sorted(_checked_env(self.env).items()))))

    @property
    def env_items(self) -> tuple[tuple[str, str], ...]:
        """``env`` as sorted (name, value) pairs."""
        return tuple(sorted(self.env.items()))


def _checked_env(env: Mapping[str, str]) -> dict[str, str]:
    """Non-secret container settings only: secrets travel per run, never in a manifest."""
    for name, value in env.items():
        if not isinstance(name, str) or not _ENV_NAME.fullmatch(name):  # pyright: ignore[reportUnnecessaryIsInstance]
            raise UsageError(
                f"PodOptions.env name {name!r} is not an environment variable name (letters, digits, _)"
            )
        if not isinstance(value, str):  # pyright: ignore[reportUnnecessaryIsInstance]
            raise UsageError(f"PodOptions.env[{name!r}] must be a string, not {type(value).__name__}")
        if _SECRET_WORDS.search(name.upper()) or looks_like_credential(value):
            raise UsageError(
                f"PodOptions.env[{name!r}] looks like a credential; manifests hold no secrets: pass it "
                "per run with secrets={...} (sandbox pods get Google credentials from Workload Identity)"
            )
    return dict(env)
