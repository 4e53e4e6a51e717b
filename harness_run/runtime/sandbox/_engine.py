"""``SandboxEngine``: the worker engine with sandboxes claimed from an Agent Sandbox warm pool.

Turns, re-attach and exec are :class:`~harness_run.runtime.worker_client._engine.WorkerEngine`'s; this adds
what is Kubernetes-specific: the claim pool (:class:`~harness_run.runtime.sandbox._claims.ClaimPool`) on the
version's template/pool, the namespace, and deleting a version's objects.
"""

from __future__ import annotations

from harness_run.compiler import SHORT_DIGEST_LEN, versioned_name
from harness_run.runtime.sandbox._claims import ClaimPool
from harness_run.runtime.sandbox._kube import Kube
from harness_run.runtime.sandbox._options import ClaimOptions
from harness_run.runtime.sandbox._versions import delete_version
from harness_run.runtime.worker_client import WorkerEngine
from harness_run.spec import AgentSpec
from harness_run.store import EngineRecord, HistoryStore

__all__ = ["SandboxEngine"]


class SandboxEngine(WorkerEngine):
    """An engine version deployed on Kubernetes Agent Sandbox (see :func:`harness_run.sandbox.deploy`);
    its sessions claim sandboxes as ``options`` (:class:`ClaimOptions`) say."""

    runtime = "sandbox"
    shares_sandboxes = True
    claims: ClaimPool

    def __init__(
        self,
        record: EngineRecord,
        *,
        store: HistoryStore,
        kube: Kube,
        options: ClaimOptions | None = None,
    ) -> None:
        options = options if options is not None else ClaimOptions()
        short = record.version[:SHORT_DIGEST_LEN]
        self.kube = kube
        self.template = versioned_name(record.name, short)
        self.pool = self.template
        claims = ClaimPool(
            kube,
            engine=record.name,
            short=short,
            pool=self.pool,
            idle_ttl=options.idle_ttl,
            claim_timeout=options.claim_timeout,
            lease=AgentSpec.from_dict(record.spec).timeout,
            router_url=options.router_url,
            store=store,
        )
        super().__init__(record, store=store, claims=claims)
        self.pool_after = options.pool_after

    @property
    def namespace(self) -> str:
        return self.kube.namespace

    def __repr__(self) -> str:
        return f"<SandboxEngine {self.name} version={self.version[:SHORT_DIGEST_LEN]} pool={self.pool}>"

    def delete_version(self, version: str) -> EngineRecord:
        """Delete a version (a digest or its prefix): its template, pool, policies and record."""
        return delete_version(self.store, self.kube, self.name, version)
