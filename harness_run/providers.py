"""Write a sandbox provider: run harness-run's sessions in sandboxes from any vendor, without
writing an engine (docs/providers.md has a complete one in about 100 lines).

A session's turns run on the worker (``python -m harness_run.worker``) inside a sandbox made of the
spec's compiled image. Everything else — turns, streaming, re-attach, ``exec``, commits on close —
is :class:`WorkerEngine`'s, the engine of the docker and Agent Sandbox runtimes. A provider only says
how a sandbox is made, checked and removed:

- subclass :class:`HeldClaims` (the per-session bookkeeping every provider shares) and implement
  ``_new`` (start a sandbox running the worker, wait until it answers, return a :class:`Claim`),
  ``_discard`` (remove it), ``_drop_left_now``, ``has_sandbox``, ``drop_session``, ``sandbox_gone``
  — the :class:`SandboxProvider` contract;
- wrap it in an engine with :func:`worker_engine`, or hand a :class:`SandboxSource` to
  ``HarnessBox(provider=...)``;
- check it with :func:`harness_run.testing.check_sandbox_provider` (the conformance suite the
  built-in providers pass).
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from harness_run.runtime import Engine
from harness_run.runtime.worker_client import Claim, HeldClaims, SandboxProvider, WorkerClient, WorkerEngine
from harness_run.spec import AgentSpec
from harness_run.store import EngineRecord, HistoryStore

__all__ = [
    "Claim",
    "HeldClaims",
    "SandboxProvider",
    "SandboxSource",
    "WorkerClient",
    "WorkerEngine",
    "deploy_on",
    "worker_engine",
]


@runtime_checkable
class SandboxSource(Protocol):
    """Where a :class:`~harness_run.harnessbox.HarnessBox` (or :func:`deploy_on`) gets sandboxes:
    the history store their workers write, and a :class:`SandboxProvider` per engine version."""

    name: str
    """The provider's name, for messages (``"e2b"``, ``"my-vms"``)."""

    def history_store(self) -> HistoryStore:
        """The store the workers in the sandboxes write (the engine reads the same one)."""
        ...

    def sandboxes(self, spec: AgentSpec, version: str) -> SandboxProvider:
        """The provider of ``spec``'s sandboxes (build or look up its image or template here;
        blocking is fine, it runs in a thread). ``version`` names the engine version."""
        ...


def worker_engine(
    spec: AgentSpec,
    sandboxes: SandboxProvider,
    *,
    store: HistoryStore,
    version: str | None = None,
    owns_store: bool = False,
) -> WorkerEngine:
    """An engine for ``spec`` whose sessions run in ``sandboxes``, its history in ``store`` (the one
    the workers write). The engine version is recorded in the store; ``version`` defaults to the
    compiled spec's digest (the image's). ``owns_store``: close ``store`` with the engine."""
    if version is None:
        from harness_run.compiler import compile

        version = compile(spec).digest
    existing = store.get_engine(spec.name, version)
    record = EngineRecord(
        name=spec.name,
        version=version,
        spec=spec.to_dict(),
        runtime="sandbox",
        created_at=existing.created_at if existing is not None else _now(),
    )
    store.put_engine(record)
    return WorkerEngine(record, store=store, claims=sandboxes, owns_store=owns_store)


async def deploy_on(source: SandboxSource, spec: AgentSpec) -> Engine:
    """``spec`` deployed on ``source``'s sandboxes (:func:`worker_engine` over
    ``source.sandboxes(spec, version)``)."""
    import asyncio

    from harness_run.compiler import compile

    version = (await asyncio.to_thread(compile, spec)).digest
    sandboxes = await asyncio.to_thread(source.sandboxes, spec, version)
    return worker_engine(spec, sandboxes, store=source.history_store(), version=version)


def _now() -> float:
    import time

    return time.time()
