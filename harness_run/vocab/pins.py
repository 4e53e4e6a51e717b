"""Pinned versions of everything the image installs: one place, one builder version.

``BUILDER_VERSION`` names this set of pins and the templates in ``images/``. Bump it whenever a pin
or a template changes meaning, so an engine version (the plan digest) always says which builder made
it. Everything here is part of the build context (``lock.json``), hence of the digest.
"""

from __future__ import annotations

from typing import Final

__all__ = [
    "BUILDER_VERSION",
    "CLAUDE_AGENT_SDK",
    "CODEX_VERSION",
    "DEFAULT_BASE_IMAGE",
    "HARNESS_CLI_PINS",
    "IMAGE_REQUIREMENTS",
    "LIBRARY_REQUIREMENTS",
    "NPM_BOOTSTRAP_TARBALL",
    "NPM_PACKAGES",
    "OPENCODE_VERSION",
    "OTEL_REQUIREMENTS",
    "WORKER_REQUIREMENTS",
]

BUILDER_VERSION: Final = "2"

DEFAULT_BASE_IMAGE: Final = "python:3.12-slim-bookworm"

# Claude Code ships inside the claude-agent-sdk wheel (``claude_agent_sdk/_bundled/claude``).
CLAUDE_AGENT_SDK: Final = "claude-agent-sdk==0.2.189"

# One version per harness on every runtime: the local runtime's copy (pyproject ``local`` extra, or
# ``scripts/bootstrap`` for OpenCode) and the image's are the same release. tests/test_pins.py holds
# them together. Codex is the newest release that both the PyPI ``openai-codex-cli-bin`` wheel (the
# local runtime) and npm publish; OpenCode is published on npm only.
CODEX_VERSION: Final = "0.163.0"
OPENCODE_VERSION: Final = "1.18.33"

# In images, Codex and OpenCode come from npm (each pulls a native binary from a platform package).
NPM_PACKAGES: Final[dict[str, str]] = {
    "codex": f"@openai/codex@{CODEX_VERSION}",
    "opencode": f"opencode-ai@{OPENCODE_VERSION}",
}

# Debian's ``npm`` package drags in ~360 node-* packages (minutes of unpacking); the image installs
# only Debian's ``nodejs`` and bootstraps this npm release from the npm registry instead.
NPM_BOOTSTRAP_TARBALL: Final = "https://registry.npmjs.org/npm/-/npm-10.9.2.tgz"

HARNESS_CLI_PINS: Final[dict[str, str]] = {
    "claude-code": CLAUDE_AGENT_SDK,
    **NPM_PACKAGES,
}

# The library's core dependencies (pyproject ``[project] dependencies``), pinned for the image.
# Also used as pip constraints for the user's ``packages``, so a conflict fails the build loudly
# instead of breaking ``import harness_run`` in the image. tests/compiler checks these satisfy pyproject.
LIBRARY_REQUIREMENTS: Final[tuple[str, ...]] = (
    "gitpython==3.2.1",
    "jinja2==3.1.6",
    "packaging==26.4",
    "pydantic==2.14.4",
    "pyyaml==6.0.4",
)

# What the in-image worker adds (pyproject's ``sandbox`` extra, minus the deployer-only clients):
# aiohttp serves the worker protocol, google-cloud-storage is the GCS history store.
WORKER_REQUIREMENTS: Final[tuple[str, ...]] = (
    "aiohttp==3.14.5",
    "google-cloud-storage==3.17.1",
)

# With ``ImageOptions(telemetry=True)`` (pyproject's ``otel`` extra): the worker exports its spans.
OTEL_REQUIREMENTS: Final[tuple[str, ...]] = (
    "opentelemetry-api==1.45.2",
    "opentelemetry-sdk==1.45.2",
    "opentelemetry-exporter-otlp-proto-http==1.45.2",
)

# requirements/harness-run.txt in the image: the library and its worker.
IMAGE_REQUIREMENTS: Final[tuple[str, ...]] = LIBRARY_REQUIREMENTS + WORKER_REQUIREMENTS
