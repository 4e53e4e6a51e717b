"""``deploy_e2b``: an engine whose sessions each run in an E2B sandbox of the compiled template.

The engine is :class:`~harness_run.runtime.worker_client.WorkerEngine` (turns on the in-image worker,
re-attach, exec) over :class:`E2BSandboxes`. The history store must be one both this process and
the sandboxes reach (``gs://bucket/prefix``): the worker writes each turn there and this side reads
the outcome. :class:`E2BProvider` is the same as a HarnessBox provider (``provider="e2b"``).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from harness_run.errors import UsageError
from harness_run.runtime import record_engine
from harness_run.runtime.e2b._sandboxes import E2BSandboxes
from harness_run.runtime.e2b._template import ensure_template
from harness_run.runtime.worker_client import WorkerEngine
from harness_run.spec import AgentSpec
from harness_run.store import open_store
from harness_run.vocab.pins import DEFAULT_BASE_IMAGE

__all__ = ["RUNTIME", "E2BEngine", "E2BProvider", "deploy_e2b"]

RUNTIME = "e2b"
_STORE_HOW = (
    "give the history store both this process and the sandboxes reach: store='gs://<bucket>/<prefix>' "
    "(or set HARNESS_RUN_STORE)"
)


class E2BEngine(WorkerEngine):
    """An engine whose sessions each run in their own E2B sandbox (paused when idle)."""

    runtime = RUNTIME
    claims: E2BSandboxes

    def __repr__(self) -> str:
        return f"<E2BEngine {self.name} template={self.claims.template}>"


def _connection(api_key: str | None, connection: Mapping[str, Any] | None) -> dict[str, Any]:
    out = dict(connection or {})
    if api_key is not None:
        out["api_key"] = api_key
    if not (out.get("api_key") or os.environ.get("E2B_API_KEY")):
        raise UsageError(
            "provider 'e2b' needs an E2B API key: pass secrets={'provider_api_key': ...} to HarnessBox, "
            "api_key= to deploy_e2b, or set E2B_API_KEY"
        )
    return out


async def deploy_e2b(
    spec: AgentSpec,
    *,
    store: str | None = None,
    api_key: str | None = None,
    connection: Mapping[str, Any] | None = None,
    base_image: str = DEFAULT_BASE_IMAGE,
    ca_files: Sequence[str | Path] = (),
    pause_after: float = 60.0,
    claim_timeout: float = 300.0,
    lifetime: int = 3600,
    sandbox_env: Mapping[str, str] | None = None,
    progress: Callable[[str], None] | None = None,
) -> E2BEngine:
    """Compile ``spec``, build its E2B template unless it exists, record the engine and return it.

    - ``store``: the history store's URL (default ``$HARNESS_RUN_STORE``), reached by this process
      and by the sandboxes' workers (``gs://``; give the sandboxes its endpoint or credentials
      through ``sandbox_env`` where they need them).
    - ``api_key``: the E2B API key (default ``$E2B_API_KEY``): given to the SDK only, never to a
      sandbox. ``connection``: more SDK settings (``domain``, ``api_url``, ``sandbox_url``,
      ``request_timeout``); unset ones come from the ``E2B_*`` variables.
    - ``base_image``, ``ca_files``: the template's base image and extra CAs (see ``ImageOptions``).
    - ``pause_after``: idle seconds before a session's sandbox is paused; ``lifetime``: E2B's
      sandbox timeout, renewed on each resume; ``claim_timeout``: how long a new sandbox's worker
      may take to answer.
    """
    from harness_run.compiler import ImageOptions, PodOptions, compile

    if not isinstance(spec, AgentSpec):  # pyright: ignore[reportUnnecessaryIsInstance]
        raise UsageError("deploy_e2b() takes an AgentSpec; load files with AgentSpec.from_yaml(path)")
    if not pause_after >= 0:
        raise UsageError(f"pause_after={pause_after!r}: give seconds >= 0 (0: pause as soon as idle)")
    params = _connection(api_key, connection)
    url = (store if store is not None else os.environ.get("HARNESS_RUN_STORE", "")).strip()
    if not url.startswith("gs://"):
        raise UsageError(f"provider 'e2b' cannot use the history store {url or '(none)'!r}; {_STORE_HOW}")
    history = open_store(url)
    image = ImageOptions(base_image=base_image, ca_files=ca_files)
    plan = compile(spec, image=image, pods=PodOptions(runtime_class=None))
    template, _built = await ensure_template(plan, params, progress=progress)
    record = record_engine(history, spec, plan.digest, RUNTIME)
    claims = E2BSandboxes(
        template=template,
        engine=spec.name,
        store_url=url,
        connection=params,
        pause_after=pause_after,
        claim_timeout=claim_timeout,
        lifetime=lifetime,
        sandbox_env=sandbox_env,
    )
    return E2BEngine(record, store=history, claims=claims, owns_store=True)


class E2BProvider:
    """HarnessBox's ``provider="e2b"``: each session in its own E2B sandbox of the spec's template,
    paused after ``pause_after`` idle seconds and resumed on the next message; ``kill()`` deletes it.

    ``api_key``: the E2B key (HarnessBox passes ``secrets["provider_api_key"]``; default
    ``$E2B_API_KEY``); ``store``: a ``gs://`` history store (default ``$HARNESS_RUN_STORE``); the rest
    as :func:`deploy_e2b`. E2B sandboxes are not network-isolated by harness-run, so
    ``deny_network`` is not enforced here."""

    name = "e2b"
    enforces_network = False

    def __init__(
        self,
        *,
        api_key: str | None = None,
        store: str | None = None,
        connection: Mapping[str, Any] | None = None,
        base_image: str = DEFAULT_BASE_IMAGE,
        ca_files: Sequence[str | Path] = (),
        pause_after: float = 60.0,
        claim_timeout: float = 300.0,
        lifetime: int = 3600,
        sandbox_env: Mapping[str, str] | None = None,
    ) -> None:
        self.api_key = api_key
        self.store = store
        self.connection = dict(connection or {})
        self.base_image = base_image
        self.ca_files = tuple(ca_files)
        self.pause_after = pause_after
        self.claim_timeout = claim_timeout
        self.lifetime = lifetime
        self.sandbox_env = dict(sandbox_env or {})

    def __repr__(self) -> str:  # never the key
        return f"<E2BProvider store={self.store!r}>"

    def use_api_key(self, key: str | None) -> None:
        """HarnessBox's ``secrets["provider_api_key"]``: the key for the SDK, unless one was given."""
        if key and not self.api_key:
            self.api_key = key

    async def deploy(self, spec: AgentSpec) -> E2BEngine:
        return await deploy_e2b(
            spec,
            store=self.store,
            api_key=self.api_key,
            connection=self.connection,
            base_image=self.base_image,
            ca_files=self.ca_files,
            pause_after=self.pause_after,
            claim_timeout=self.claim_timeout,
            lifetime=self.lifetime,
            sandbox_env=self.sandbox_env,
        )
