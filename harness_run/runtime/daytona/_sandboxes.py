"""``DaytonaSandboxes``: a Daytona sandbox of the engine's snapshot per session.

The :class:`~harness_run.runtime.worker_client.SandboxProvider` of ``provider="daytona"``. A claim creates
a sandbox from the engine's snapshot (the compiled image) whose worker listens on a port of its own
behind a fresh bearer token (only its SHA-256 enters the sandbox), reached through the sandbox's
preview link for that port (the SDK's ``get_preview_link``: its URL and the
``X-Daytona-Preview-Token`` header). After ``idle_ttl`` seconds without a turn the sandbox is
**stopped**, not deleted: its filesystem, and the session's workspace in it, stay; the next turn of
the session starts it again (the worker comes back with the same token). ``release``, ``close`` and
``kill`` delete. The Daytona API key lives only in this process's SDK client: the sandboxes get the
worker's settings and nothing else. The SDK (``pip install "harness-run[daytona]"``) is imported
when the first sandbox is asked for; every SDK call is blocking and runs in a thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import secrets
import time
import urllib.error
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from harness_run.errors import InfrastructureError, UsageError, redact
from harness_run.runtime.worker_client import Claim, HeldClaims
from harness_run.vocab.k8s import AGENT_NETNS_ENV, AGENT_RUN_UID, AGENT_UID_ENV
from harness_run.vocab.net import free_port

__all__ = [
    "LABEL_ENGINE",
    "LABEL_SESSION",
    "PREVIEW_TOKEN_HEADER",
    "STORE_MOUNT",
    "DaytonaSandboxes",
    "daytona_client",
]

LABEL_ENGINE = "harness-run.dev/engine"
LABEL_SESSION = "harness-run.dev/session"
LABEL_HOLDER = "harness-run.dev/claimed-by"
PREVIEW_TOKEN_HEADER = "X-Daytona-Preview-Token"
STORE_MOUNT = "/var/lib/harness-run/store"
_PROBE_INTERVAL = 0.05
_DIRECT = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def daytona_client(api_key: str | None, api_url: str | None, target: str | None) -> Any:
    """The SDK's synchronous client (``daytona.Daytona``) for this key and endpoint (``None``: the
    SDK's own ``DAYTONA_API_KEY``/``DAYTONA_API_URL``/``DAYTONA_TARGET``)."""
    try:
        from daytona import Daytona, DaytonaConfig, DaytonaError
    except ImportError:
        raise UsageError(
            "provider 'daytona' needs the Daytona SDK: pip install 'harness-run[daytona]'"
        ) from None
    try:
        return Daytona(DaytonaConfig(api_key=api_key, api_url=api_url, target=target))
    except DaytonaError as exc:
        raise UsageError(
            f"provider 'daytona': {exc} (pass DaytonaProvider(api_key=...), HarnessBox's "
            "secrets={'provider_api_key': ...}, or set DAYTONA_API_KEY)"
        ) from None


@dataclass
class _Parked:
    """A stopped sandbox this process can start again for its session."""

    sandbox_id: str
    token: str
    port: int


class DaytonaSandboxes(HeldClaims):
    """The Daytona sandboxes this process runs, one per session, for one engine version."""

    def __init__(
        self,
        client: Any,
        *,
        snapshot: str,
        engine: str,
        api_key: str | None = None,
        idle_ttl: float = 300.0,
        claim_timeout: float = 300.0,
        env: Mapping[str, str] | None = None,
        store_url: str,
        store_volume: str | None = None,
        labels: Mapping[str, str] | None = None,
        agent_netns: str = "own",
        auto_delete_minutes: int | None = None,
    ) -> None:
        super().__init__(idle_ttl=idle_ttl, claim_timeout=claim_timeout, holder_prefix="daytona")
        self.daytona = client
        self.snapshot = snapshot
        self.engine = engine
        self.env = dict(env or {})
        self.store_url = store_url
        self.store_volume = store_volume
        self.labels = dict(labels or {})
        self.agent_netns = agent_netns
        self.auto_delete_minutes = auto_delete_minutes
        self._redact = [api_key] if api_key else []
        self._parked: dict[str, _Parked] = {}
        self._tokens: dict[str, tuple[str, int]] = {}  # sandbox id -> (worker token, port)
        self.stopped: list[str] = []
        """Sandboxes stopped after their idle TTL, in order (what the tests and benchmarks watch)."""

    # --- the idle hop: stop, and start again on the next turn ----------------------------------------

    def done_with(self, claim: Claim) -> None:
        """The turn is over: after ``idle_ttl`` seconds without another, the sandbox is stopped (its
        filesystem kept); a broken claim, or ``idle_ttl <= 0``, is released (deleted) at once."""
        claim.busy = max(0, claim.busy - 1)
        if claim.busy or self._held.get(claim.session_id) is not claim:
            return
        if claim.broken or self.idle_ttl <= 0:
            self._spawn(self.release(claim))
            return
        hold = self.idle_ttl + max(0.0, claim.linger)
        claim.idle = asyncio.get_running_loop().call_later(hold, lambda: self._spawn(self.pause(claim)))

    async def pause(self, claim: Claim) -> None:
        """Stop the claim's sandbox now, keeping it for the session's next turn."""
        if claim.idle is not None:
            claim.idle.cancel()
            claim.idle = None
        if self._held.get(claim.session_id) is not claim or claim.busy:
            return
        del self._held[claim.session_id]
        with contextlib.suppress(Exception):
            await claim.client.close()
        token, port = self._tokens[claim.sandbox]
        try:
            await asyncio.to_thread(self._stop, claim.sandbox)
        except InfrastructureError:
            await asyncio.to_thread(self._delete, claim.sandbox)
            return
        self._parked[claim.session_id] = _Parked(claim.sandbox, token, port)
        self.stopped.append(claim.sandbox)

    async def _new(self, session_id: str) -> Claim:
        parked = self._parked.pop(session_id, None)
        if parked is not None:
            started = time.monotonic()
            try:
                url, preview = await asyncio.to_thread(self._start, parked.sandbox_id, parked.port)
                await asyncio.to_thread(self._wait_healthy, parked.sandbox_id, url, preview)
            except InfrastructureError:
                await asyncio.to_thread(self._delete, parked.sandbox_id)
            else:
                return self._claim(session_id, parked.sandbox_id, parked.token, url, preview, started)
        token = secrets.token_urlsafe(32)
        started = time.monotonic()
        port = free_port()
        sandbox_id, url, preview = await asyncio.to_thread(self._create, session_id, token, port)
        self._tokens[sandbox_id] = (token, port)
        try:
            await asyncio.to_thread(self._wait_healthy, sandbox_id, url, preview)
        except BaseException:
            await asyncio.to_thread(self._delete, sandbox_id)
            raise
        return self._claim(session_id, sandbox_id, token, url, preview, started)

    def _claim(
        self, session_id: str, sandbox_id: str, token: str, url: str, preview: str, started: float
    ) -> Claim:
        from harness_run.runtime.worker_client import WorkerClient

        return Claim(
            name=sandbox_id,
            session_id=session_id,
            sandbox=sandbox_id,
            url=url,
            client=WorkerClient(url, token, headers={PREVIEW_TOKEN_HEADER: preview}),
            claimed_at=time.time(),
            ready_s=time.monotonic() - started,
        )

    # --- SandboxProvider ---------------------------------------------------------------------------

    async def close(self) -> None:
        await super().close()
        for session_id in list(self._parked):
            parked = self._parked.pop(session_id)
            await asyncio.to_thread(self._delete, parked.sandbox_id)

    def release_now(self) -> None:
        super().release_now()
        for parked in list(self._parked.values()):
            with contextlib.suppress(Exception):
                self._delete(parked.sandbox_id)
        self._parked.clear()

    async def has_sandbox(self, session_id: str) -> bool:
        return bool(await asyncio.to_thread(self._session_sandboxes, session_id, True))

    async def drop_session(self, session_id: str) -> None:
        for sandbox_id in await asyncio.to_thread(self._session_sandboxes, session_id, False):
            await asyncio.to_thread(self._delete, sandbox_id)

    async def sandbox_gone(self, claim: Claim) -> str | None:
        return await asyncio.to_thread(self._gone, claim.sandbox)

    def _discard(self, claim: Claim) -> None:
        self._delete(claim.sandbox)

    def _drop_left_now(self, session_id: str) -> None:
        parked = self._parked.pop(session_id, None)
        if parked is not None:
            self._delete(parked.sandbox_id)
        for sandbox_id in self._session_sandboxes(session_id, False):
            self._delete(sandbox_id)

    # --- the SDK (blocking; called in threads) -------------------------------------------------------

    def _error(self, what: str, exc: BaseException) -> InfrastructureError:
        return InfrastructureError(f"Daytona: {what}: {redact(str(exc), self._redact)}", retryable=True)

    def _create(self, session_id: str, token: str, port: int) -> tuple[str, str, str]:
        from daytona import CreateSandboxFromSnapshotParams, DaytonaError, VolumeMount

        env = {
            **self.env,
            "HARNESS_RUN_WORKER_HOST": "0.0.0.0",
            "HARNESS_RUN_WORKER_PORT": str(port),
            "HARNESS_RUN_WORKER_TOKEN_SHA256": hashlib.sha256(token.encode()).hexdigest(),
            "HARNESS_RUN_STORE": STORE_MOUNT if self.store_volume else self.store_url,
            AGENT_UID_ENV: str(AGENT_RUN_UID),
            AGENT_NETNS_ENV: self.agent_netns,
        }
        volumes = (
            [VolumeMount(volume_id=self.store_volume, mount_path=STORE_MOUNT)] if self.store_volume else None
        )
        params = CreateSandboxFromSnapshotParams(
            snapshot=self.snapshot,
            os_user="root",  # the worker drops to the image's user, the agent runs as another uid
            env_vars=env,
            labels={
                **self.labels,
                LABEL_ENGINE: self.engine,
                LABEL_SESSION: session_id,
                LABEL_HOLDER: self.holder,
            },
            volumes=volumes,
            auto_stop_interval=0,  # this process stops it (idle_ttl) and knows to start it again
            auto_delete_interval=self.auto_delete_minutes,
        )
        try:
            sandbox = self.daytona.create(params, timeout=self.claim_timeout)
        except DaytonaError as exc:
            raise self._error(f"could not create a sandbox of snapshot {self.snapshot}", exc) from None
        try:
            link = sandbox.get_preview_link(port)
        except DaytonaError as exc:
            self._delete(sandbox.id)
            raise self._error(f"no preview link for port {port} of sandbox {sandbox.id}", exc) from None
        return str(sandbox.id), str(link.url), str(link.token)

    def _start(self, sandbox_id: str, port: int) -> tuple[str, str]:
        from daytona import DaytonaError

        try:
            sandbox = self.daytona.get(sandbox_id)
            sandbox.start(timeout=self.claim_timeout)
            link = sandbox.get_preview_link(port)
        except DaytonaError as exc:
            raise self._error(f"could not start sandbox {sandbox_id} again", exc) from None
        return str(link.url), str(link.token)

    def _stop(self, sandbox_id: str) -> None:
        from daytona import DaytonaError

        try:
            self.daytona.get(sandbox_id).stop(timeout=self.claim_timeout)
        except DaytonaError as exc:
            raise self._error(f"could not stop sandbox {sandbox_id}", exc) from None

    def _delete(self, sandbox_id: str) -> None:
        self._tokens.pop(sandbox_id, None)
        with contextlib.suppress(Exception):
            self.daytona.get(sandbox_id).delete()

    def _session_sandboxes(self, session_id: str, started_only: bool) -> list[str]:
        from daytona import DaytonaError, ListSandboxesQuery

        query = ListSandboxesQuery(labels={LABEL_ENGINE: self.engine, LABEL_SESSION: session_id})
        try:
            found = list(self.daytona.list(query))
        except DaytonaError as exc:
            raise self._error("cannot list the session's sandboxes", exc) from None
        states = {"started", "starting"} if started_only else None
        return [
            str(s.id)
            for s in found
            if str(getattr(s.state, "value", s.state)) != "destroyed"
            and (states is None or str(getattr(s.state, "value", s.state)) in states)
        ]

    def _gone(self, sandbox_id: str) -> str | None:
        from daytona import DaytonaError, DaytonaNotFoundError

        try:
            sandbox = self.daytona.get(sandbox_id)
        except DaytonaNotFoundError:
            return "was deleted"
        except DaytonaError:
            return None  # the API hiccuped; the event stream decides
        state = str(getattr(sandbox.state, "value", sandbox.state))
        if state in ("started", "starting"):
            return None
        return "was deleted" if state in ("destroyed", "destroying") else f"is {state}"

    def _wait_healthy(self, sandbox_id: str, url: str, preview: str) -> None:
        deadline = time.monotonic() + self.claim_timeout
        next_check = 0.0
        request = urllib.request.Request(f"{url}/healthz", headers={PREVIEW_TOKEN_HEADER: preview})
        while True:
            try:
                with _DIRECT.open(request, timeout=2) as resp:
                    if 200 <= int(resp.status) < 300:
                        return
            except (urllib.error.URLError, OSError, ValueError):
                pass
            now = time.monotonic()
            if now >= next_check:
                gone = self._gone(sandbox_id)
                if gone is not None:
                    raise InfrastructureError(
                        f"the Daytona sandbox {sandbox_id} of snapshot {self.snapshot} {gone} before its "
                        "worker answered"
                    )
                next_check = now + 1.0
            if now > deadline:
                raise InfrastructureError(
                    f"the worker in Daytona sandbox {sandbox_id} ({self.snapshot}) did not answer at its "
                    f"preview link within {self.claim_timeout:g} s",
                    retryable=True,
                )
            time.sleep(_PROBE_INTERVAL)
