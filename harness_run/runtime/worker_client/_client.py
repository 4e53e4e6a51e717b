"""``WorkerClient``: the async HTTP client of a sandbox's worker (aiohttp, imported on first use).

Idempotent calls (health, start_turn, events, steer with a message id, interrupt) retry while the
worker is unreachable, for ``unreachable_after`` seconds; then they raise ``InfrastructureError``
naming the address. The event stream is the HTTP kit's SSE client
(:func:`harness_run.web.follow_events`), re-connecting for ``unreachable_after`` seconds too.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
import uuid
from collections.abc import AsyncIterator, Mapping
from types import TracebackType
from typing import TYPE_CHECKING, Any, Self

from pydantic import BaseModel, ValidationError

from harness_run.errors import (
    InfrastructureError,
    SessionBusyError,
    SessionNotFoundError,
    SpecError,
    SpecIssue,
    UsageError,
)
from harness_run.runtime.worker_client._protocol import (
    DeliverRequest,
    DeliverResponse,
    ExecRequest,
    ExecResponse,
    Health,
    InterruptResponse,
    SteerRequest,
    SteerResponse,
    TurnInfo,
    TurnRequest,
)
from harness_run.telemetry import inject
from harness_run.web import follow_events, read_error

if TYPE_CHECKING:
    import aiohttp

__all__ = ["WorkerClient"]

_RETRY_PAUSE = 0.2


class WorkerClient:
    """Talks to one worker: ``WorkerClient("http://10.0.0.7:8787", token)``.

    ``headers`` are added to every request (e.g. a router's sandbox-id header). Use it as an async
    context manager, or call ``close()``.
    """

    def __init__(
        self,
        base_url: str,
        token: str,
        *,
        headers: Mapping[str, str] | None = None,
        timeout: float = 30.0,
        unreachable_after: float = 10.0,
        unix_socket: str | None = None,
    ) -> None:
        if not base_url.startswith(("http://", "https://")):
            raise UsageError(f"the worker address must be an http(s) URL, not {base_url!r}")
        self.base_url = base_url.rstrip("/")
        self.timeout = timeout
        self.unreachable_after = unreachable_after
        self._headers = {**(headers or {}), "Authorization": f"Bearer {token}"}
        self.unix_socket = unix_socket
        """Connect through this unix socket (a container without network) instead of TCP."""
        self._http: aiohttp.ClientSession | None = None

    def __repr__(self) -> str:  # never the token
        return f"WorkerClient({self.base_url!r})"

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()

    async def close(self) -> None:
        if self._http is not None:
            await self._http.close()
            self._http = None

    def _session(self) -> aiohttp.ClientSession:
        if self._http is None or self._http.closed:
            import aiohttp

            self._http = aiohttp.ClientSession(
                headers=self._headers,
                timeout=aiohttp.ClientTimeout(total=self.timeout, sock_connect=5),
                connector=aiohttp.UnixConnector(self.unix_socket) if self.unix_socket else None,
            )
        return self._http

    # --- calls ------------------------------------------------------------------------------

    async def health(self) -> Health:
        return await self._call("GET", "/healthz", None, Health, retry=True)

    async def start_turn(self, request: TurnRequest) -> TurnInfo:
        """Start a turn (idempotent by ``turn_id``: a retry gets the same TurnInfo)."""
        return await self._call("POST", "/v1/turns", request, TurnInfo, retry=True)

    async def turn(self, turn_id: str) -> TurnInfo:
        return await self._call("GET", f"/v1/turns/{turn_id}", None, TurnInfo, retry=True)

    async def steer(self, turn_id: str, text: str, *, message_id: str | None = None) -> bool:
        body = SteerRequest(text=text, message_id=message_id or uuid.uuid4().hex)
        answer = await self._call("POST", f"/v1/turns/{turn_id}/steer", body, SteerResponse, retry=True)
        return answer.delivered

    async def interrupt(self, turn_id: str) -> bool:
        answer = await self._call(
            "POST", f"/v1/turns/{turn_id}/interrupt", None, InterruptResponse, retry=True
        )
        return answer.interrupted

    async def exec(
        self,
        session_id: str,
        command: str,
        *,
        timeout: float = 120.0,
        secrets: Mapping[str, str] | None = None,
    ) -> ExecResponse:
        body = ExecRequest(
            session_id=session_id, command=command, timeout=timeout, secrets=dict(secrets or {})
        )
        return await self._call("POST", "/v1/exec", body, ExecResponse, retry=False, extra_time=timeout)

    async def deliver(
        self,
        session_id: str,
        *,
        secrets: Mapping[str, str] | None = None,
        turn_config: Mapping[str, Any] | None = None,
    ) -> DeliverResponse:
        """Commit (and push) the session's work now (``git.commit="on_close"``)."""
        body = DeliverRequest(
            session_id=session_id,
            secrets=dict(secrets or {}),
            turn_config=dict(turn_config) if turn_config is not None else None,
        )
        return await self._call("POST", "/v1/deliver", body, DeliverResponse, retry=False, extra_time=120.0)

    async def events(self, turn_id: str, after: int = -1) -> AsyncIterator[dict[str, Any]]:
        """The turn's events with ``seq > after`` as dicts, live, ending with the ``result`` event.

        A dropped stream is resumed from the last event seen (``Last-Event-ID``).
        """
        stream = follow_events(
            f"{self.base_url}/v1/turns/{turn_id}/events",
            refused=self._error,
            lost=f"the event stream of turn {turn_id} from the worker at {self.base_url}",
            last_id=str(after) if after >= 0 else None,
            session=self._session,
            reconnect_for=self.unreachable_after,
        )
        async with contextlib.aclosing(stream):
            async for frame in stream:
                if frame.event == "worker-error":
                    raise InfrastructureError(
                        f"the worker at {self.base_url} failed the turn: {read_error(frame.data).message}"
                    )
                yield json.loads(frame.data)
                if frame.event == "result":
                    return

    # --- plumbing ---------------------------------------------------------------------------

    async def _call[M: BaseModel](
        self,
        method: str,
        path: str,
        body: BaseModel | None,
        model: type[M],
        *,
        retry: bool,
        extra_time: float = 0.0,
    ) -> M:
        import aiohttp

        url = f"{self.base_url}{path}"
        data = body.model_dump_json() if body is not None else None
        headers = inject({"Content-Type": "application/json"} if data is not None else {})
        timeout = aiohttp.ClientTimeout(total=self.timeout + extra_time, sock_connect=5)
        deadline = time.monotonic() + self.unreachable_after
        while True:
            try:
                async with self._session().request(
                    method, url, data=data, headers=headers, timeout=timeout
                ) as response:
                    text = await response.text()
                    if response.status != 200:
                        raise self._error(response.status, text)
            except (aiohttp.ClientConnectionError, TimeoutError) as exc:
                if not retry or time.monotonic() >= deadline:
                    raise InfrastructureError(
                        f"the worker at {self.base_url} is unreachable ({type(exc).__name__}: {exc}); "
                        "check that the sandbox is running and ready",
                        retryable=True,
                    ) from None
                await asyncio.sleep(_RETRY_PAUSE)
                continue
            try:
                return model.model_validate_json(text)
            except ValidationError:
                raise InfrastructureError(
                    f"the worker at {self.base_url} answered {method} {path} with an unexpected body; "
                    "is it the same harness-run version?"
                ) from None

    def _error(self, status: int, text: str) -> Exception:
        body = read_error(text)
        message, code = body.message, body.error or None
        if status == 400:
            return UsageError(message)
        if status == 401:
            return InfrastructureError(
                f"the worker at {self.base_url} refused the bearer token (HTTP 401): {message}",
                status=status,
                code=code or "unauthorized",
            )
        if status == 404:
            return SessionNotFoundError(message)
        if status == 409:
            return SessionBusyError(message)
        if status == 422:
            return SpecError([SpecIssue(body.field or "", message)])
        return InfrastructureError(
            f"the worker at {self.base_url} answered HTTP {status}: {message}",
            retryable=status >= 500,
            status=status,
            code=code,
        )
