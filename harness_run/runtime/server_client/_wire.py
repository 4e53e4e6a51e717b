"""The client's HTTP plumbing: blocking JSON calls (stdlib urllib, for the synchronous parts of the
Session API) and the event streams, through the HTTP kit's SSE client
(:func:`harness_run.web.follow_events`: aiohttp, re-connecting with ``Last-Event-ID``)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import urllib.error
import urllib.request
from collections.abc import AsyncIterator
from typing import Any

from harness_run.errors import (
    InfrastructureError,
    PermissionDeniedError,
    SessionBusyError,
    SessionNotFoundError,
    SpecError,
    SpecIssue,
    UsageError,
)
from harness_run.telemetry import inject
from harness_run.web import follow_events, read_error

__all__ = ["IDENTITY_TOKEN_ENV", "Wire"]

IDENTITY_TOKEN_ENV = "HARNESS_RUN_IDENTITY_TOKEN"
"""A Google identity token for a private Cloud Run service (``gcloud auth print-identity-token``):
sent as ``X-Serverless-Authorization`` beside the API key."""


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
        body = read_error(text)
        message = body.message
        if status == 401:
            return UsageError(f"the server at {self.base_url} refused the API key (HTTP 401): {message}")
        if status == 404:
            return SessionNotFoundError(message)
        if status == 403:
            return PermissionDeniedError(
                f"the server refused: {message}" + (f" (allowed by: {body.allow})" if body.allow else ""),
                field=body.field,
                allow=body.allow,
            )
        if status == 409:
            return SessionBusyError(message)
        if status == 422:
            return SpecError([SpecIssue(body.field or "", message)])
        if status < 500:
            return UsageError(message)
        return InfrastructureError(
            f"the server at {self.base_url} answered HTTP {status}: {message}",
            status=status,
            code=body.error or None,
        )

    async def events(self, path: str, after: str) -> AsyncIterator[tuple[str, dict[str, Any]]]:
        """(id, event JSON) of an SSE stream after the id ``after``, live, until the caller stops
        reading; a dropped connection is resumed with ``Last-Event-ID`` for up to
        :data:`~harness_run.web.RECONNECT_FOR` seconds (the HTTP kit's policy)."""
        last = after
        stream = follow_events(
            f"{self.base_url}{path}",
            refused=self.error,
            lost=f"the event stream from the server at {self.base_url}",
            headers=self._headers,
            last_id=after or None,
        )
        async with contextlib.aclosing(stream):
            async for frame in stream:
                last = frame.id or last
                yield last, json.loads(frame.data)
