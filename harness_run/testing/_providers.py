"""The sandbox provider conformance suite: checks a real :class:`~harness_run.providers.SandboxProvider`
keeps the port's contract (docs/providers.md). No pytest needed::

    from harness_run.testing import check_sandbox_provider

    await check_sandbox_provider(lambda idle_ttl: MySandboxes(..., idle_ttl=idle_ttl))

``make(idle_ttl)`` returns a fresh provider whose claims are kept ``idle_ttl`` seconds after use.
Each check makes its own provider, uses session ids of its own and closes the provider at the end;
:data:`PROVIDER_CHECKS` names them one by one (a pytest parametrization runs each as a test).
Typed structurally: this module imports nothing of the runtime.
"""

from __future__ import annotations

import asyncio
import inspect
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

__all__ = ["PROVIDER_CHECKS", "ProviderFactory", "check_sandbox_provider"]

ProviderFactory = Callable[[float], Any]
"""``make(idle_ttl) -> SandboxProvider`` (or an awaitable of one)."""

_LONG_TTL = 300.0
_SHORT_TTL = 0.5


async def _make(make: ProviderFactory, idle_ttl: float) -> Any:
    made = make(idle_ttl)
    return await made if inspect.isawaitable(made) else made


def _sid() -> str:
    return f"conf-{uuid.uuid4().hex[:12]}"


async def _healthy(claim: Any) -> None:
    try:
        await asyncio.wait_for(claim.client.health(), 10)
    except Exception as exc:
        raise AssertionError(f"the worker of claim {claim.name} does not answer /healthz: {exc}") from exc


async def _gone_within(provider: Any, claim: Any, seconds: float, why: str) -> str:
    deadline = time.monotonic() + seconds
    while True:
        reason = await provider.sandbox_gone(claim)
        if reason is not None and not await provider.has_sandbox(claim.session_id):
            return str(reason)
        if time.monotonic() > deadline:
            raise AssertionError(f"{why}: sandbox {claim.name} still there after {seconds:g} s")
        await asyncio.sleep(0.1)


async def acquire_reuse_release(make: ProviderFactory) -> None:
    """acquire -> a claim whose worker answers; acquire again while held -> the same sandbox;
    release -> gone (``held`` None, ``has_sandbox`` False, ``sandbox_gone`` a reason)."""
    provider = await _make(make, _LONG_TTL)
    sid = _sid()
    try:
        claim = await provider.acquire(sid)
        assert claim.session_id == sid, (claim.session_id, sid)
        await _healthy(claim)
        assert provider.held(sid) is claim
        assert await provider.has_sandbox(sid)
        assert await provider.sandbox_gone(claim) is None
        provider.done_with(claim)
        again = await provider.acquire(sid)
        assert again.name == claim.name, f"a held, healthy claim was not reused: {claim.name} -> {again.name}"
        provider.done_with(again)
        await provider.release(again)
        assert provider.held(sid) is None
        await _gone_within(provider, again, 30, "release()")
    finally:
        await provider.close()


async def idle_release(make: ProviderFactory) -> None:
    """done_with -> kept idle_ttl seconds, then released without another call."""
    provider = await _make(make, _SHORT_TTL)
    sid = _sid()
    try:
        claim = await provider.acquire(sid)
        provider.done_with(claim)
        assert provider.held(sid) is claim, "released before idle_ttl passed"
        await _gone_within(provider, claim, _SHORT_TTL + 30, "idle_ttl")
        assert provider.held(sid) is None
    finally:
        await provider.close()


async def dead_worker_replaced(make: ProviderFactory) -> None:
    """A held claim whose sandbox was removed (``forget_now``'s twin, from outside) is replaced by
    a new one on the next acquire."""
    provider = await _make(make, _LONG_TTL)
    sid = _sid()
    try:
        claim = await provider.acquire(sid)
        provider.done_with(claim)
        provider._discard(claim)  # the sandbox dies under the claim (vendor side)
        await _gone_within(provider, claim, 30, "removing the sandbox")
        fresh = await provider.acquire(sid)
        assert fresh.name != claim.name
        await _healthy(fresh)
        provider.done_with(fresh)
    finally:
        await provider.close()


async def lend_moves_the_sandbox(make: ProviderFactory) -> None:
    """lend(donor, sid) moves the donor's idle claim (same sandbox) to sid; a busy donor lends nothing."""
    provider = await _make(make, _LONG_TTL)
    donor, taker = _sid(), _sid()
    try:
        claim = await provider.acquire(donor)
        assert await provider.lend(donor, taker) is None, "a busy claim was lent"
        provider.done_with(claim)
        moved = await provider.lend(donor, taker)
        assert moved is not None, "an idle claim was not lent"
        assert (moved.name, moved.session_id) == (claim.name, taker)
        assert provider.held(donor) is None
        assert provider.held(taker) is moved
        assert await provider.lend(donor, _sid()) is None, "lent twice"
        await _healthy(moved)
        again = await provider.acquire(taker)
        assert again.name == claim.name
        provider.done_with(again)
    finally:
        await provider.close()


async def drop_and_forget(make: ProviderFactory) -> None:
    """drop_session on another provider instance (another process, holding nothing) removes the
    sandbox one instance left; forget_now removes a held one (blocking); close releases the rest."""
    left, here = await _make(make, _LONG_TTL), await _make(make, _LONG_TTL)
    one, two = _sid(), _sid()
    try:
        claim = await left.acquire(one)
        left.done_with(claim)
        assert await here.has_sandbox(one), "another instance does not see the session's sandbox"
        await here.drop_session(one)
        await _gone_within(here, claim, 30, "drop_session() from another instance")
        other = await here.acquire(two)
        here.done_with(other)
        await asyncio.to_thread(here.forget_now, two)
        assert here.held(two) is None
        await _gone_within(here, other, 30, "forget_now()")
        last = await here.acquire(one)
        here.done_with(last)
    finally:
        await left.close()
        await here.close()
    await _gone_within(here, last, 30, "close()")


PROVIDER_CHECKS: dict[str, Callable[[ProviderFactory], Awaitable[None]]] = {
    "acquire_reuse_release": acquire_reuse_release,
    "idle_release": idle_release,
    "dead_worker_replaced": dead_worker_replaced,
    "lend_moves_the_sandbox": lend_moves_the_sandbox,
    "drop_and_forget": drop_and_forget,
}
"""Every check, by name (each makes and closes its own provider)."""


async def check_sandbox_provider(make: ProviderFactory) -> None:
    """Run every check of :data:`PROVIDER_CHECKS`; the first that fails raises ``AssertionError``."""
    for check in PROVIDER_CHECKS.values():
        await check(make)
