"""``E2BSandboxes``: one E2B sandbox of the engine's template per session, paused when idle.

The :class:`~harness_run.runtime.worker_client.SandboxProvider` of the E2B runtime. A claim creates a
sandbox from the engine's template (the ``e2b`` SDK, imported lazily); the template's start
command waits for ``/run/harness-run/env``, which this process writes through the SDK's filesystem
API as root (the claim's token hash, the history store, the agent's uid), then sources and deletes
it and starts the worker. The worker is reached at the address the SDK gives for its port
(``https://<port>-<id>.<domain>``; with a sandbox URL configured, that URL plus the SDK's own
``E2b-Sandbox-Id``/``E2b-Sandbox-Port`` routing headers). ``pause_after`` seconds after a turn the
sandbox is **paused** (E2B's pause API: memory and filesystem kept, $0 while paused); the session's
next turn or command resumes it (``connect``) and finds its worker, workspace and token as they
were. Killing the session, closing the engine or leaving the interpreter deletes the sandbox. The
E2B API key is given to the SDK only: it never enters a sandbox.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import os
import secrets
import shlex
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from harness_run.errors import InfrastructureError
from harness_run.runtime.worker_client import Claim, HeldClaims
from harness_run.vocab.k8s import AGENT_NETNS_ENV, AGENT_RUN_UID, AGENT_UID_ENV, WORKER_PORT

if TYPE_CHECKING:
    from e2b import AsyncSandbox

__all__ = ["ENV_FILE", "META_ENGINE", "META_HOLDER", "META_SESSION", "START_CMD", "E2BSandboxes", "why_of"]

ENV_FILE = "/run/harness-run/env"
"""Where a claim's worker settings arrive (root-only; sourced and deleted by the start command)."""
START_CMD = (
    f"/bin/sh -c 'while [ ! -s {ENV_FILE} ]; do sleep 0.05; done; set -a; . {ENV_FILE}; set +a; "
    f"rm -f {ENV_FILE}; exec python -m harness_run.worker'"
)
"""The template's start command: wait for the claim's settings, then become the worker."""
META_ENGINE = "harness-run-engine"
META_SESSION = "harness-run-session"
META_HOLDER = "harness-run-holder"
_PROBE = 0.05


class E2BSandboxes(HeldClaims):
    """The E2B sandboxes this process holds, one per session, for one engine version.

    ``connection``: the SDK's connection settings (``api_key``, ``domain``, ``api_url``,
    ``sandbox_url``, ``request_timeout``…; unset ones come from ``E2B_*`` variables as the SDK
    reads them). ``sandbox_env``: more variables for the worker (non-secret: the store's endpoint,
    a proxy…). ``lifetime``: the sandbox timeout E2B enforces (seconds; renewed on every resume):
    a sandbox whose holder vanished is killed by E2B then."""

    def __init__(
        self,
        *,
        template: str,
        engine: str,
        store_url: str,
        connection: Mapping[str, Any] | None = None,
        pause_after: float = 60.0,
        claim_timeout: float = 300.0,
        lifetime: int = 3600,
        sandbox_env: Mapping[str, str] | None = None,
        worker_port: int = WORKER_PORT,
    ) -> None:
        super().__init__(idle_ttl=pause_after, claim_timeout=claim_timeout, holder_prefix="e2b")
        self.template = template
        self.engine = engine
        self.store_url = store_url
        self.connection: dict[str, Any] = {k: v for k, v in (connection or {}).items() if v is not None}
        self.pause_after = pause_after
        self.lifetime = lifetime
        self.sandbox_env = dict(sandbox_env or {})
        self.worker_port = worker_port
        self.paused: set[str] = set()
        """Sandboxes this process paused (resumed on the session's next turn)."""
        self._parked: dict[str, Claim] = {}
        """Session -> the claim on its paused sandbox (no longer held: ``acquire`` resumes it)."""
        self.pauses = 0
        self.resumes = 0

    def __repr__(self) -> str:
        return f"<E2BSandboxes template={self.template!r} held={len(self._held)}>"

    # --- claims ----------------------------------------------------------------------------------

    async def _new(self, session_id: str) -> Claim:
        from e2b import AsyncSandbox

        parked = self._parked.pop(session_id, None)
        if parked is not None and await self._resume(parked):
            return parked
        token = secrets.token_urlsafe(32)
        started = time.monotonic()
        metadata = {META_ENGINE: self.engine, META_SESSION: session_id, META_HOLDER: self.holder}
        try:
            sandbox = await AsyncSandbox.create(
                template=self.template, timeout=self.lifetime, metadata=metadata, **self.connection
            )
        except Exception as exc:
            raise InfrastructureError(
                f"E2B could not create a sandbox of template {self.template!r} for session "
                f"{session_id}: {why_of(exc)}",
                retryable=True,
            ) from None
        try:
            await sandbox.files.write(ENV_FILE, self._settings(token), user="root")  # pyright: ignore[reportUnknownMemberType]
            claim = self._claim(sandbox, session_id, token, started)
            await self._wait_healthy(claim)
        except BaseException:
            with contextlib.suppress(Exception):
                await sandbox.kill()
            raise
        return claim

    def _settings(self, token: str) -> str:
        values = {
            **self.sandbox_env,
            "HARNESS_RUN_STORE": self.store_url,
            "HARNESS_RUN_WORKER_TOKEN_SHA256": hashlib.sha256(token.encode()).hexdigest(),
            AGENT_UID_ENV: str(AGENT_RUN_UID),
        }
        lines = [f"{k}={shlex.quote(v)}" for k, v in sorted(values.items())]
        # the sandbox's platform may place the worker itself (a port, a shared network namespace)
        lines += [
            f'HARNESS_RUN_WORKER_PORT="${{HARNESS_RUN_WORKER_PORT:-{self.worker_port}}}"',
            f'{AGENT_NETNS_ENV}="${{{AGENT_NETNS_ENV}:-own}}"',
        ]
        return "\n".join(lines) + "\n"

    def _claim(self, sandbox: AsyncSandbox, session_id: str, token: str, started: float) -> Claim:
        from harness_run.runtime.worker_client import WorkerClient

        url, headers = self.worker_address(sandbox)
        return Claim(
            name=sandbox.sandbox_id,
            session_id=session_id,
            sandbox=sandbox.sandbox_id,
            url=url,
            client=WorkerClient(url, token, headers=headers),
            claimed_at=time.time(),
            ready_s=time.monotonic() - started,
        )

    def worker_address(self, sandbox: AsyncSandbox) -> tuple[str, dict[str, str]]:
        """The worker's URL and routing headers: ``https://`` + ``sandbox.get_host(port)``, or, with
        a sandbox URL configured (``sandbox_url=`` / ``E2B_SANDBOX_URL``), that URL with the
        ``E2b-Sandbox-Id``/``E2b-Sandbox-Port`` headers the SDK routes its own requests by."""
        headers: dict[str, str] = {}
        if sandbox.traffic_access_token:
            headers["e2b-traffic-access-token"] = sandbox.traffic_access_token
        routed = self.connection.get("sandbox_url") or os.environ.get("E2B_SANDBOX_URL")
        if routed:
            headers |= {"E2b-Sandbox-Id": sandbox.sandbox_id, "E2b-Sandbox-Port": str(self.worker_port)}
            return str(routed), headers
        return f"https://{sandbox.get_host(self.worker_port)}", headers

    async def _wait_healthy(self, claim: Claim) -> None:
        deadline = time.monotonic() + self.claim_timeout
        while True:
            try:
                await asyncio.wait_for(claim.client.health(), 5.0)
                return
            except Exception as exc:
                if time.monotonic() > deadline:
                    raise InfrastructureError(
                        f"the worker in E2B sandbox {claim.sandbox} (template {self.template!r}) did "
                        f"not answer at {claim.url} within {self.claim_timeout:g} s: {why_of(exc)}",
                        retryable=True,
                    ) from None
            gone = await self.sandbox_gone(claim)
            if gone is not None:
                raise InfrastructureError(
                    f"E2B sandbox {claim.sandbox} {gone} before its worker answered", retryable=True
                )
            await asyncio.sleep(_PROBE)

    # --- pause / resume --------------------------------------------------------------------------

    def done_with(self, claim: Claim) -> None:
        """The turn or command is over: pause the sandbox after ``pause_after`` idle seconds."""
        claim.busy = max(0, claim.busy - 1)
        if claim.busy or self._held.get(claim.session_id) is not claim:
            return
        if claim.broken:
            self._spawn(self.release(claim))
            return
        loop = asyncio.get_running_loop()
        claim.idle = loop.call_later(self.pause_after, lambda: self._spawn(self._pause(claim)))

    async def _pause(self, claim: Claim) -> None:
        """Pause the idle claim's sandbox; it is then parked, not held (``held`` None,
        ``has_sandbox`` False, ``sandbox_gone`` "is paused") until ``acquire`` resumes it."""
        from e2b import AsyncSandbox

        async with self._locks.setdefault(claim.session_id, asyncio.Lock()):
            claim.idle = None
            if claim.busy or self._held.get(claim.session_id) is not claim:
                return
            try:
                await AsyncSandbox.pause(claim.sandbox, **self.connection)  # pyright: ignore[reportCallIssue, reportUnknownMemberType]
            except Exception:
                return  # still running: the next turn uses it as it is
            del self._held[claim.session_id]
            with contextlib.suppress(Exception):
                await claim.client.close()  # its connections belong to the frozen sandbox
            self.paused.add(claim.sandbox)
            self._parked[claim.session_id] = claim
            self.pauses += 1

    async def pause_now(self, session_id: str) -> bool:
        """Pause the session's idle sandbox at once (what ``pause_after`` does later); False when
        there is none or it is in use."""
        claim = self._held.get(session_id)
        if claim is None or claim.busy:
            return False
        if claim.idle is not None:
            claim.idle.cancel()
        await self._pause(claim)
        return claim.sandbox in self.paused

    async def _resume(self, claim: Claim) -> bool:
        """Resume a parked claim's sandbox (E2B's ``connect``) and wait for its worker; False (the
        sandbox deleted) when it cannot come back."""
        from e2b import AsyncSandbox

        self.paused.discard(claim.sandbox)
        started = time.monotonic()
        try:
            await AsyncSandbox.connect(claim.sandbox, timeout=self.lifetime, **self.connection)
            await self._wait_healthy(claim)
        except Exception:
            await asyncio.to_thread(self._kill, claim.sandbox)
            return False
        self.resumes += 1
        claim.ready_s = time.monotonic() - started
        return True

    async def close(self) -> None:
        await super().close()
        while self._parked:
            _, claim = self._parked.popitem()
            self.paused.discard(claim.sandbox)
            await asyncio.to_thread(self._kill, claim.sandbox)

    def release_now(self) -> None:
        super().release_now()
        while self._parked:
            _, claim = self._parked.popitem()
            self._kill(claim.sandbox)

    # --- sandboxes (the SDK; blocking ones run in threads or at exit) -----------------------------

    def _discard(self, claim: Claim) -> None:
        if self._parked.get(claim.session_id) is claim:
            del self._parked[claim.session_id]
        self.paused.discard(claim.sandbox)
        self._kill(claim.sandbox)

    def _kill(self, sandbox_id: str) -> None:
        from e2b import Sandbox

        with contextlib.suppress(Exception):
            Sandbox.kill(sandbox_id, **self.connection)  # pyright: ignore[reportCallIssue, reportUnknownMemberType]

    def _session_sandboxes(self, session_id: str) -> list[tuple[str, str]]:
        """(id, state) of every running or paused sandbox of the session, whoever made it."""
        from e2b import Sandbox, SandboxQuery

        query = SandboxQuery(metadata={META_ENGINE: self.engine, META_SESSION: session_id})
        found: list[tuple[str, str]] = []
        try:
            pages = Sandbox.list(query=query, **self.connection)
            while True:
                found += [(s.sandbox_id, str(getattr(s.state, "value", s.state))) for s in pages.next_items()]
                if not pages.has_next:
                    break
        except Exception as exc:
            why = f"cannot list the session's E2B sandboxes: {why_of(exc)}"
            raise InfrastructureError(why, retryable=True) from None
        return found

    def _drop_left_now(self, session_id: str) -> None:
        parked = self._parked.pop(session_id, None)
        if parked is not None:
            self.paused.discard(parked.sandbox)
        for sandbox_id, _state in self._session_sandboxes(session_id):
            self._kill(sandbox_id)

    async def has_sandbox(self, session_id: str) -> bool:
        """Whether a sandbox of the session runs (a paused one does not)."""
        found = await asyncio.to_thread(self._session_sandboxes, session_id)
        return any(state == "running" for _id, state in found)

    async def drop_session(self, session_id: str) -> None:
        await asyncio.to_thread(self._drop_left_now, session_id)

    async def sandbox_gone(self, claim: Claim) -> str | None:
        from e2b import AsyncSandbox
        from e2b.exceptions import NotFoundException

        if claim.sandbox in self.paused:
            return "is paused"
        try:
            info = await AsyncSandbox.get_info(claim.sandbox, **self.connection)  # pyright: ignore[reportCallIssue, reportUnknownMemberType, reportUnknownVariableType]
        except NotFoundException:
            return "was deleted"
        except Exception:
            return None
        state = str(getattr(info.state, "value", info.state))  # pyright: ignore[reportUnknownMemberType, reportUnknownArgumentType]
        return None if state == "running" else f"is {state} (not by this process: its E2B timeout?)"


def why_of(exc: BaseException) -> str:
    """An SDK error, in one line (never a traceback)."""
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text[:500]
