"""Sandbox claims: take a sandbox from the engine's warm pool, reach its worker, release it.

One claim serves one session at a time. It is created with a fresh bearer token whose sha256 goes
into the pod's annotations (``additionalPodMetadata``); the token itself stays in this process.
After a turn the claim is kept for ``idle_ttl`` seconds for the next turn or ``exec``, then
deleted (auto-pause): the next turn claims again and the worker resumes from the history store.

A claim this process cannot release (it exits, crashes or loses its event loop) still ends: each
claim carries ``lifecycle.shutdownTime`` (a lease of turn timeout + idle TTL, renewed on reuse) with
``shutdownPolicy: Delete``, and held claims are deleted at interpreter exit.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import secrets
import time
import uuid
from datetime import UTC, datetime
from typing import cast

from harness_run.compiler import engine_labels
from harness_run.errors import InfrastructureError
from harness_run.runtime.sandbox._kube import Kube, Obj, get_list, get_map, get_str
from harness_run.runtime.worker_client import Claim, HeldClaims
from harness_run.store import HistoryStore, engine_view
from harness_run.vocab import k8s

__all__ = ["LABEL_SESSION", "Claim", "ClaimPool", "claim_ready", "worker_address"]

LABEL_SESSION = "harness-run.dev/session"
ANNOTATION_CLAIMED_BY = "harness-run.dev/claimed-by"
ROUTER_HEADER = "X-Sandbox-ID"


def claim_ready(obj: Obj | None) -> bool:
    if obj is None:
        return True  # deleted: stop watching (the caller sees None)
    ready = any(
        get_str(c, "type") == "Ready" and get_str(c, "status") == "True"
        for c in get_list(obj, "status", "conditions")
    )
    return ready and bool(get_str(obj, "status", "sandbox", "name"))


def worker_address(claim: Obj, sandbox: Obj | None) -> str:
    """``http://<pod IP>:<port>`` from the claim's status (else the Sandbox's) and the port annotation."""
    ips = _strings(get_map(claim, "status", "sandbox").get("podIPs"))
    if not ips:
        ips = _strings(get_map(sandbox, "status").get("podIPs"))
    if not ips:
        raise InfrastructureError(
            f"sandbox claim {get_str(claim, 'metadata', 'name')} is Ready but reports no pod IP; "
            "the Agent Sandbox controller may be too old (needs status.sandbox.podIPs)",
            retryable=True,
        )
    port = get_str(sandbox, "metadata", "annotations", k8s.ANNOTATION_WORKER_PORT) or str(k8s.WORKER_PORT)
    host = ips[0]
    if ":" in host:  # IPv6
        host = f"[{host}]"
    return f"http://{host}:{int(port)}"


class ClaimPool(HeldClaims):
    """The claims this process holds, one per session, for one engine version (the Agent Sandbox
    :class:`~harness_run.runtime.worker_client._provider.SandboxProvider`)."""

    def __init__(
        self,
        kube: Kube,
        *,
        engine: str,
        short: str,
        pool: str,
        idle_ttl: float,
        claim_timeout: float,
        lease: float = 3600.0,
        router_url: str | None = None,
        store: HistoryStore | None = None,
    ) -> None:
        super().__init__(idle_ttl=idle_ttl, claim_timeout=claim_timeout, holder_prefix="client")
        self.kube = kube
        self.engine = engine
        self.short = short
        self.pool = pool
        self.lease = lease + max(0.0, idle_ttl) + claim_timeout
        self.router_url = router_url.rstrip("/") if router_url else None
        self.store = engine_view(store, engine) if store is not None else None
        """Where the claim tickets go (``k8s.CLAIM_TICKET``): the engine's history store."""
        self._tickets: dict[str, str] = {}
        """claim name -> its ticket's blob key (deleted with the claim)."""

    async def _reused(self, claim: Claim) -> None:
        """Push the claim's shutdownTime forward when less than half its lease is left."""
        now = time.time()
        if claim.expires - now > self.lease / 2:
            return
        expires = now + self.lease
        body = {"spec": {"lifecycle": {"shutdownTime": _timestamp(expires), "shutdownPolicy": "Delete"}}}
        with contextlib.suppress(InfrastructureError):
            await asyncio.to_thread(self.kube.patch, k8s.SANDBOX_CLAIM, claim.name, body)
            claim.expires = expires

    def _relabel(self, claim: Claim) -> None:
        """The claim's session label names its new session (lookups by session find it there)."""
        body = {"metadata": {"labels": {LABEL_SESSION: claim.session_id}}}
        self.kube.patch(k8s.SANDBOX_CLAIM, claim.name, body)

    def _discard(self, claim: Claim) -> None:
        """Delete the claim (its sandbox goes with it) and its ticket."""
        with contextlib.suppress(InfrastructureError):
            self.kube.delete(k8s.SANDBOX_CLAIM, claim.name)
        self._drop_ticket(claim.name)

    def _put_ticket(self, name: str, token_sha256: str) -> None:
        """The claim's ticket in the store: the worker accepts the token on first contact, before the
        kubelet has written the pod's annotations (``k8s.CLAIM_TICKET``)."""
        if self.store is not None:
            self._tickets[name] = self.store.put_blob(k8s.CLAIM_TICKET + token_sha256.encode())

    def _drop_ticket(self, name: str) -> None:
        key = self._tickets.pop(name, None)
        if key is not None and self.store is not None:
            with contextlib.suppress(Exception):  # a ticket left behind only names a dead claim's hash
                self.store.delete_blob(key)

    # --- claiming --------------------------------------------------------------------------------

    def claim_body(self, name: str, session_id: str, token_sha256: str, expires: float) -> Obj:
        labels = {**engine_labels(self.engine, self.short), LABEL_SESSION: session_id}
        return {
            "apiVersion": k8s.SANDBOX_CLAIM.api_version,
            "kind": k8s.SANDBOX_CLAIM.kind,
            "metadata": {
                "name": name,
                "namespace": self.kube.namespace,
                "labels": labels,
                "annotations": {ANNOTATION_CLAIMED_BY: self.holder},
            },
            "spec": {
                "warmPoolRef": {"name": self.pool},
                "lifecycle": {"shutdownTime": _timestamp(expires), "shutdownPolicy": "Delete"},
                "additionalPodMetadata": {
                    "labels": {LABEL_SESSION: session_id},
                    "annotations": {k8s.ANNOTATION_TOKEN_SHA256: token_sha256},
                },
            },
        }

    async def _new(self, session_id: str) -> Claim:
        from harness_run.runtime.worker_client import WorkerClient

        token = secrets.token_urlsafe(32)
        digest = hashlib.sha256(token.encode()).hexdigest()
        name = f"{self.pool[:48].rstrip('-')}-{uuid.uuid4().hex[:8]}"
        started = time.monotonic()
        expires = time.time() + self.lease
        failed = [  # the ticket is stored while the claim is created
            r
            for r in await asyncio.gather(
                asyncio.to_thread(self._put_ticket, name, digest),
                asyncio.to_thread(self.kube.create, self.claim_body(name, session_id, digest, expires)),
                return_exceptions=True,
            )
            if isinstance(r, BaseException)
        ]
        if failed:
            with contextlib.suppress(Exception):
                await asyncio.to_thread(self.kube.delete, k8s.SANDBOX_CLAIM, name)
            await asyncio.to_thread(self._drop_ticket, name)
            raise failed[0]
        try:
            obj = await asyncio.to_thread(
                self.kube.wait_for, k8s.SANDBOX_CLAIM, name, claim_ready, self.claim_timeout
            )
        except TimeoutError:
            with contextlib.suppress(InfrastructureError):
                await asyncio.to_thread(self.kube.delete, k8s.SANDBOX_CLAIM, name)
            await asyncio.to_thread(self._drop_ticket, name)
            raise InfrastructureError(
                f"sandbox claim {name} on warm pool {self.pool} (namespace {self.kube.namespace}) "
                f"did not become Ready within {self.claim_timeout:g} s; check the pool with `kubectl "
                f"get sandboxwarmpool {self.pool} -n {self.kube.namespace}` and the controller's "
                "events (image pull, node capacity, runtime class)",
                retryable=True,
            ) from None
        except BaseException:
            with contextlib.suppress(Exception):
                await asyncio.to_thread(self.kube.delete, k8s.SANDBOX_CLAIM, name)
            self._drop_ticket(name)
            raise
        if obj is None:
            self._drop_ticket(name)
            raise InfrastructureError(
                f"sandbox claim {name} on warm pool {self.pool} was deleted before it became Ready",
                retryable=True,
            )
        sandbox_name = get_str(obj, "status", "sandbox", "name")
        try:
            sandbox = await asyncio.to_thread(self.kube.get, k8s.SANDBOX, sandbox_name)
            if self.router_url:
                url = self.router_url
                client = WorkerClient(url, token, headers={ROUTER_HEADER: sandbox_name})
            else:
                url = worker_address(obj, sandbox)
                client = WorkerClient(url, token)
        except BaseException:
            with contextlib.suppress(Exception):
                await asyncio.to_thread(self.kube.delete, k8s.SANDBOX_CLAIM, name)
            self._drop_ticket(name)
            raise
        return Claim(
            name=name,
            session_id=session_id,
            sandbox=sandbox_name,
            url=url,
            client=client,
            claimed_at=time.time(),
            ready_s=time.monotonic() - started,
            expires=expires,
        )

    async def session_claims(self, session_id: str) -> list[Obj]:
        """Every claim (of any process) labelled with this session, oldest first."""
        items = await asyncio.to_thread(self.kube.list, k8s.SANDBOX_CLAIM, {LABEL_SESSION: session_id})
        return sorted(items, key=lambda o: get_str(o, "metadata", "creationTimestamp"))

    async def has_sandbox(self, session_id: str) -> bool:
        return bool(await self.session_claims(session_id))

    async def drop_session(self, session_id: str) -> None:
        """Delete the session's claims (their client is gone: nobody else releases them)."""
        for obj in await self.session_claims(session_id):
            with contextlib.suppress(InfrastructureError):
                await asyncio.to_thread(self.kube.delete, k8s.SANDBOX_CLAIM, get_str(obj, "metadata", "name"))

    def _drop_left_now(self, session_id: str) -> None:
        for obj in self.kube.list(k8s.SANDBOX_CLAIM, {LABEL_SESSION: session_id}):
            with contextlib.suppress(InfrastructureError):
                self.kube.delete(k8s.SANDBOX_CLAIM, get_str(obj, "metadata", "name"))

    async def sandbox_gone(self, claim: Claim) -> str | None:
        """Why the claim's Sandbox is gone (deleted, or not Ready), else None."""
        try:
            obj = await asyncio.to_thread(self.kube.get, k8s.SANDBOX, claim.sandbox)
        except InfrastructureError:
            return None  # the API server hiccuped; the event stream decides
        if obj is None:
            return "was deleted"
        for cond in get_list(obj, "status", "conditions"):
            if get_str(cond, "type") == "Ready" and get_str(cond, "status") != "True":
                why = ": ".join(x for x in (get_str(cond, "reason"), get_str(cond, "message")) if x)
                return f"stopped being Ready ({why or 'no reason given'})"
        return None


def _strings(value: object) -> list[str]:
    """The strings of a JSON list (``[]`` for anything else)."""
    return [str(v) for v in cast("list[object]", value)] if isinstance(value, list) else []


def _timestamp(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
