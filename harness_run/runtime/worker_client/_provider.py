"""The sandbox provider port: what an engine whose turns run on the in-image worker needs from
whatever gives it sandboxes (public as :mod:`harness_run.providers`; see docs/providers.md).

A :class:`SandboxProvider` hands out :class:`Claim` s: a sandbox bound to one session, the address
of its worker and a :class:`~harness_run.runtime.worker_client.WorkerClient` holding the claim's
bearer token. The Kubernetes Agent Sandbox runtime claims pods from a warm pool
(:class:`harness_run.runtime.sandbox._claims.ClaimPool`); local container isolation starts a Docker
container per session (:class:`harness_run.runtime.container.ContainerPool`). The engine
(:class:`harness_run.runtime.worker_client._engine.WorkerEngine`) is the same for all; a new provider
subclasses :class:`HeldClaims` and says how a sandbox is made, checked and removed.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import uuid
import weakref
from collections import deque
from collections.abc import Coroutine
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from harness_run.runtime.worker_client._client import WorkerClient

__all__ = ["Claim", "HeldClaims", "SandboxProvider"]

_HEALTH_TIMEOUT = 2.0


@dataclass
class Claim:
    """A bound sandbox: its name, the worker's address and the client holding the token."""

    name: str
    session_id: str
    sandbox: str
    url: str
    client: WorkerClient
    claimed_at: float
    ready_s: float
    expires: float = 0.0
    busy: int = 0
    broken: bool = False
    linger: float = 0.0
    """Seconds the claim is kept beyond ``idle_ttl`` after use (a sandbox whose workspace another
    session of the same (remote, branch) may take over, see ``WorkerEngine``)."""
    idle: asyncio.TimerHandle | None = field(default=None, repr=False)


class SandboxProvider(Protocol):
    """The sandboxes of one engine version, as this process sees them.

    The contract (``harness_run.testing.check_sandbox_provider`` checks it on a real provider):

    - ``acquire(sid)`` returns a :class:`Claim` whose worker answers ``GET /healthz`` through
      ``claim.client``; while that claim is held and its worker answers, ``acquire(sid)`` returns the
      same claim again (``busy`` counts the users); a held claim whose worker stopped answering is
      released and replaced.
    - ``done_with(claim)`` ends one use; once no use is left the claim is kept ``idle_ttl`` seconds
      (so the next turn reuses it), then released — or, by a provider that can (E2B, Daytona),
      paused or stopped: no longer ``held``, not ``has_sandbox``, and the next ``acquire`` brings
      the same sandbox back. ``release(claim)`` gives the sandbox up at once:
      ``held(sid)`` is None, ``has_sandbox(sid)`` False, ``sandbox_gone(claim)`` a reason.
    - ``lend(donor, sid)`` moves the idle claim of session ``donor`` to ``sid`` (same sandbox, same
      workspace); None when ``donor`` has no idle claim or ``sid`` already holds one.
    - ``drop_session(sid)`` removes the session's sandboxes that another process (another provider
      instance) left: the engine calls it only when this one holds none for ``sid``.
      ``forget_now(sid)`` removes all of them, held here or left, blocking.
    - ``close()`` / ``release_now()`` release everything this process holds.
    - ``sandbox_gone(claim)``: a reason string once the sandbox is gone or stopped, None while it runs
      (one check, transient errors answer None).

    Errors: a sandbox that cannot be made or never becomes ready is an
    :class:`~harness_run.InfrastructureError` (``retryable`` when trying again may help) naming the
    sandbox and what to check; secrets never appear in them.
    """

    holder: str
    """Who this process is (the store's turn reservations name it)."""
    claim_timeout: float
    """How long a claim may take to become ready (a turn that never starts is orphaned after it)."""

    def held(self, session_id: str) -> Claim | None:
        """The claim this process holds for the session, if any."""
        ...

    async def acquire(self, session_id: str) -> Claim:
        """The session's held claim if its worker answers, else a new one (waits until ready)."""
        ...

    def done_with(self, claim: Claim) -> None:
        """A turn or command is over: keep the claim for the idle TTL, then release it."""
        ...

    async def lend(self, donor: str, session_id: str) -> Claim | None:
        """Move the idle claim held for session ``donor`` to ``session_id`` (its sandbox, and the
        workspace in it, now serve that session); None when there is no idle one to move."""
        ...

    async def release(self, claim: Claim) -> None:
        """Give the sandbox up now (it is deleted) and forget the claim."""
        ...

    async def close(self) -> None:
        """Release every claim this process holds."""
        ...

    def release_now(self) -> None:
        """The same, blocking (``close()`` without a running turn, interpreter exit)."""
        ...

    async def has_sandbox(self, session_id: str) -> bool:
        """Whether any process still holds a live sandbox for the session."""
        ...

    async def drop_session(self, session_id: str) -> None:
        """Release the session's sandboxes left by a process that is gone (not ones held here)."""
        ...

    def worker_gone_now(self, session_id: str) -> bool:
        """True when it is known at once, without a cluster round trip that needs credentials, that
        no worker of the session runs (blocking; False when it cannot tell: the turn's lease
        decides then)."""
        ...

    def forget_now(self, session_id: str) -> None:
        """Remove every sandbox of the session, blocking: the one held here and any left by other
        processes (``delete_session``: the workspace lives only there)."""
        ...

    async def sandbox_gone(self, claim: Claim) -> str | None:
        """Why the claim's sandbox is gone (``"was deleted"``…), or None while it is there. One
        check; the engine polls it while a turn runs. Transient errors answer None."""
        ...


class HeldClaims:
    """The bookkeeping every provider shares: one claim per session, reused while its worker
    answers, kept ``idle_ttl`` seconds after use, released on ``close()`` and at interpreter exit.
    Subclasses say how a claim is made (``_new``), refreshed on reuse (``_reused``) and given up
    (``_discard``, blocking: it also runs at exit, with no event loop left)."""

    def __init__(self, *, idle_ttl: float, claim_timeout: float, holder_prefix: str) -> None:
        self.idle_ttl = idle_ttl
        self.claim_timeout = claim_timeout
        self.holder = f"{holder_prefix}-{uuid.uuid4().hex[:12]}"
        self._held: dict[str, Claim] = {}
        self._locks: dict[str, asyncio.Lock] = {}
        self.claimed: deque[Claim] = deque(maxlen=1000)
        """The last claims this process made, in order (``ready_s``: requested -> worker ready)."""
        _LIVE.add(self)

    async def _new(self, session_id: str) -> Claim:
        raise NotImplementedError

    async def _reused(self, claim: Claim) -> None:
        """Called when a held claim serves another turn (e.g. to renew its lease)."""

    def _discard(self, claim: Claim) -> None:
        raise NotImplementedError

    def held(self, session_id: str) -> Claim | None:
        return self._held.get(session_id)

    async def acquire(self, session_id: str) -> Claim:
        """The session's held claim if its worker answers, else a new one (waits until ready)."""
        async with self._locks.setdefault(session_id, asyncio.Lock()):
            claim = self._held.get(session_id)
            if claim is not None:
                if claim.idle is not None:
                    claim.idle.cancel()
                    claim.idle = None
                if not claim.broken and await self._healthy(claim):
                    await self._reused(claim)
                    claim.busy += 1
                    return claim
                await self.release(claim)
            claim = await self._new(session_id)
            self.claimed.append(claim)
            claim.busy += 1
            self._held[session_id] = claim
            return claim

    def done_with(self, claim: Claim) -> None:
        """The turn or command is over: keep the claim for ``idle_ttl`` seconds, then release it."""
        claim.busy = max(0, claim.busy - 1)
        if claim.busy or self._held.get(claim.session_id) is not claim:
            return
        if claim.broken or self.idle_ttl <= 0:
            self._spawn(self.release(claim))
            return
        loop = asyncio.get_running_loop()
        hold = self.idle_ttl + max(0.0, claim.linger)
        claim.idle = loop.call_later(hold, lambda: self._spawn(self.release(claim)))

    async def lend(self, donor: str, session_id: str) -> Claim | None:
        """Move the idle claim held for ``donor`` to ``session_id`` (see :class:`SandboxProvider`)."""
        async with self._locks.setdefault(donor, asyncio.Lock()):
            claim = self._held.get(donor)
            if claim is None or claim.busy or claim.broken or session_id in self._held:
                return None
            if claim.idle is not None:
                claim.idle.cancel()
                claim.idle = None
            del self._held[donor]
            claim.session_id = session_id
            claim.linger = 0.0
            self._held[session_id] = claim
        try:
            await asyncio.to_thread(self._relabel, claim)
        except BaseException:
            await self.release(claim)
            raise
        return claim

    def _relabel(self, claim: Claim) -> None:
        """Record on the sandbox that it now serves ``claim.session_id`` (blocking)."""

    async def release(self, claim: Claim) -> None:
        """Give the sandbox up now and forget the claim."""
        if claim.idle is not None:
            claim.idle.cancel()
            claim.idle = None
        if self._held.get(claim.session_id) is claim:
            del self._held[claim.session_id]
        with contextlib.suppress(Exception):
            await claim.client.close()
        await asyncio.to_thread(self._discard, claim)

    async def close(self) -> None:
        for claim in list(self._held.values()):
            await self.release(claim)

    def release_now(self) -> None:
        """Give up every held claim, blocking (``close()`` without a loop, interpreter exit)."""
        for claim in list(self._held.values()):
            if claim.idle is not None:
                claim.idle.cancel()
            with contextlib.suppress(Exception):
                self._discard(claim)
        self._held.clear()

    def forget_now(self, session_id: str) -> None:
        """Remove every sandbox of the session, blocking (see :class:`SandboxProvider`)."""
        claim = self._held.pop(session_id, None)
        if claim is not None:
            if claim.idle is not None:
                claim.idle.cancel()
            try:
                asyncio.get_running_loop()
            except RuntimeError:
                pass  # no loop here (a thread, exit): the client is collected
            else:
                self._spawn(claim.client.close())
            self._discard(claim)
        self._drop_left_now(session_id)

    def _drop_left_now(self, session_id: str) -> None:
        """Remove the session's sandboxes that other processes left (blocking)."""
        raise NotImplementedError

    def worker_gone_now(self, session_id: str) -> bool:
        return False

    async def _healthy(self, claim: Claim) -> bool:
        try:
            await asyncio.wait_for(claim.client.health(), _HEALTH_TIMEOUT)
        except Exception:
            return False
        return True

    _tasks: set[asyncio.Task[Any]] = set()

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        HeldClaims._tasks.add(task)
        task.add_done_callback(HeldClaims._tasks.discard)


_LIVE: weakref.WeakSet[HeldClaims] = weakref.WeakSet()


@atexit.register
def _release_at_exit() -> None:
    for provider in list(_LIVE):
        provider.release_now()
