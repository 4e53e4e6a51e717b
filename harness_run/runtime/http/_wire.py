"""The client's HTTP plumbing: blocking JSON calls (stdlib urllib, for the synchronous parts of the
Session API) and an SSE reader (aiohttp) that resumes with ``Last-Event-ID``."""

from __future__ import annotations

import asyncio
import json
import os
import time
import urllib.error
import urllib.request
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any, cast

from harness_run.errors import (
    InfrastructureError,
    PermissionDeniedError,
    SessionBusyError,
    SessionNotFoundError,
    SpecError,
    SpecIssue,
    UsageError,
)
from harness_run.vocab.telemetry import inject

if TYPE_CHECKING:
    import aiohttp

__all__ = ["IDENTITY_TOKEN_ENV", "Wire"]

IDENTITY_TOKEN_ENV = "HARNESS_RUN_IDENTITY_TOKEN"
"""A Google identity token for a private Cloud Run service (``gcloud auth print-identity-token``):
sent as ``X-Serverless-Authorization`` beside the API key."""

_RECONNECT_FOR = 10.0
_READ_TIMEOUT = 60.0  # the server sends a keep-alive comment every second while idle


class Wire:
    """Calls to one server with one API key (never shown: not in repr, not in errors)."""

    def __init__(self, base_url: str, api_key: str, *, timeout: float = 30.0) -> None:
        if not base_url.startswith(("http://", "https://")):
            raise UsageError(f"connect() needs the server's http(s) URL, not {base_url!r}")
        self.base_url = base_url.rstrip("/")
        self.timeout = timeout
        self._headers = {"Authorization": f"Bearer {api_key}", "Content-Type": "application/json"}
        identity = os.environ.get(IDENTITY_TOKEN_ENV)
        if identity:  # a private Cloud Run service: its IAM check reads this header, the server the key
            self._headers["X-Serverless-Authorization"] = f"Bearer {identity.strip()}"

    def __repr__(self) -> str:
        return f"Wire({self.base_url!r})"

    def call(
        self, method: str, path: str, body: dict[str, Any] | None = None, *, timeout: float | None = None
    ) -> Any:
        """One JSON request; the answer's JSON (None for 204), or the error it stands for."""
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(
            f"{self.base_url}{path}", data=data, method=method, headers=inject(dict(self._headers))
        )
        try:
            with urllib.request.urlopen(request, timeout=timeout or self.timeout) as answer:
                text = answer.read().decode()
                return json.loads(text) if text else None
        except urllib.error.HTTPError as exc:
            raise self.error(exc.code, exc.read().decode(errors="replace")) from None
        except (urllib.error.URLError, OSError) as exc:
            raise InfrastructureError(
                f"the server at {self.base_url} is unreachable ({exc}); is `harness-run serve` running?",
                retryable=True,
            ) from None

    async def acall(self, method: str, path: str, body: dict[str, Any] | None = None, **kw: float) -> Any:
        return await asyncio.to_thread(self.call, method, path, body, **kw)

    def error(self, status: int, text: str) -> Exception:
        try:
            parsed: object = json.loads(text)
        except ValueError:
            parsed = None
        fields = cast(dict[str, Any], parsed) if isinstance(parsed, dict) else {}
        message = str(fields.get("message") or text[:500])
        if status == 401:
            return UsageError(f"the server at {self.base_url} refused the API key (HTTP 401): {message}")
        if status == 404:
            return SessionNotFoundError(message)
        if status == 403:
            allow = fields.get("allow")
            return PermissionDeniedError(
                f"the server refused: {message}" + (f" (allowed by: {allow})" if allow else ""),
                field=str(fields["field"]) if fields.get("field") else None,
                allow=str(allow) if allow else None,
            )
        if status == 409:
            return SessionBusyError(message)
        if status == 422:
            return SpecError([SpecIssue(str(fields.get("field") or ""), message)])
        if status < 500:
            return UsageError(message)
        code = str(fields["error"]) if fields.get("error") else None
        return InfrastructureError(
            f"the server at {self.base_url} answered HTTP {status}: {message}", status=status, code=code
        )

    async def events(self, path: str, after: str) -> AsyncIterator[tuple[str, dict[str, Any]]]:
        """(id, event JSON) of an SSE stream after the id ``after``, live; a dropped connection is
        resumed with ``Last-Event-ID`` for up to 10 s. Ends when the server ends the stream."""
        import aiohttp

        last = after
        timeout = aiohttp.ClientTimeout(total=None, sock_connect=5, sock_read=_READ_TIMEOUT)
        deadline: float | None = None
        while True:
            headers = inject({**self._headers, "Accept": "text/event-stream", "Last-Event-ID": last})
            try:
                async with (
                    aiohttp.ClientSession() as http,
                    http.get(f"{self.base_url}{path}", headers=headers, timeout=timeout) as answer,
                ):
                    if answer.status != 200:
                        raise self.error(answer.status, await answer.text())
                    deadline = None
                    async for seq, data in _sse(answer.content):
                        last = seq or last
                        yield last, json.loads(data)
                    return
            except (aiohttp.ClientError, TimeoutError) as exc:
                now = time.monotonic()
                deadline = deadline or now + _RECONNECT_FOR
                if now >= deadline:
                    raise InfrastructureError(
                        f"lost the event stream from {self.base_url} ({type(exc).__name__}) and could not "
                        f"re-connect for {_RECONNECT_FOR:g} s",
                        retryable=True,
                    ) from None
            await asyncio.sleep(0.2)


async def _sse(stream: aiohttp.StreamReader) -> AsyncIterator[tuple[str | None, str]]:
    """(id, data) of each server-sent event in a response body; comments are skipped."""
    buffer = b""
    data: list[str] = []
    seq: str | None = None
    async for chunk in stream.iter_any():
        buffer += chunk
        *lines, buffer = buffer.split(b"\n")
        for raw in lines:
            line = raw.decode("utf-8", errors="replace").rstrip("\r")
            if not line:
                if data:
                    yield seq, "\n".join(data)
                data, seq = [], None
            elif not line.startswith(":"):
                name, _, value = line.partition(":")
                value = value.removeprefix(" ")
                if name == "data":
                    data.append(value)
                elif name == "id":
                    seq = value
