"""Errors as JSON, one shape and one status table for the team server and the worker: every failure
of a request becomes an :class:`ErrorBody` with its status — never a traceback, an HTML page, or a
secret value of the request (they are redacted from every message)."""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, Protocol, cast

from pydantic import BaseModel, ConfigDict

from harness_run.errors import (
    HarnessRunError,
    PermissionDeniedError,
    SessionBusyError,
    SessionNotFoundError,
    SpecError,
    UsageError,
    redact,
)
from harness_run.web._body import MAX_BODY, BodyError, request_secrets

if TYPE_CHECKING:
    from aiohttp import web

__all__ = [
    "ErrorBody",
    "Handler",
    "Middleware",
    "error",
    "error_middleware",
    "json_response",
    "read_error",
]

Handler = Callable[["web.Request"], Awaitable["web.StreamResponse"]]
"""A request handler (an aiohttp route's, or the next middleware)."""


class Middleware(Protocol):
    """An aiohttp middleware."""

    def __call__(self, request: web.Request, handler: Handler) -> Awaitable[web.StreamResponse]: ...


class ErrorBody(BaseModel):
    """The body of every error answer of the team server and the worker."""

    model_config = ConfigDict(extra="forbid", defer_build=True)

    error: str
    """A short code: ``bad_request`` (400), ``unauthorized`` (401), ``forbidden`` (403), ``not_found``
    (404), ``method_not_allowed`` (405), ``session_busy`` (409), ``too_large`` (413), ``invalid``
    (422: a body or value that does not validate), ``internal`` (500); the server adds ``decided``
    (409), ``too_many_streams`` and ``too_many_failures`` (429)."""
    message: str
    field: str | None = None
    """The field at fault (a dotted path), when one is."""
    allow: str | None = None
    """On a 403: the scope, policy key or ``serve`` flag that would allow the request."""


def error(
    status: int, code: str, message: str, field: str | None = None, *, allow: str | None = None
) -> web.Response:
    """An :class:`ErrorBody` answer."""
    body = ErrorBody(error=code, message=message, field=field, allow=allow)
    return _json(body.model_dump_json(exclude_none=True), status)


def json_response(model: BaseModel, status: int = 200) -> web.Response:
    """A JSON answer of ``model``."""
    return _json(model.model_dump_json(), status)


def _json(text: str, status: int) -> web.Response:
    from aiohttp import web

    return web.Response(text=text, status=status, content_type="application/json")


def error_middleware(service: str, api: str) -> Middleware:
    """The middleware answering every failure of a request as an :class:`ErrorBody`, with the
    request's secret values redacted. ``service`` names this process in 500s (``"server"``: "the
    server failed: …") and its logger (``harness_run.server``); ``api`` says where its routes and
    bodies are documented (``"/openapi.json"``).

    The status table: a body that cannot be used (:class:`BodyError`) and
    :class:`~harness_run.errors.SpecError` 422 ``invalid``;
    :class:`~harness_run.errors.PermissionDeniedError` 403 ``forbidden`` (with ``field`` and
    ``allow``); ``SessionNotFoundError`` 404 ``not_found``; ``SessionBusyError`` 409
    ``session_busy``; any other :class:`~harness_run.errors.UsageError` 400 ``bad_request``;
    aiohttp's own 404, 405 and 413 ``not_found``, ``method_not_allowed``, ``too_large``; anything
    else 500 ``internal``, logged without a traceback (its last line would repeat the unredacted
    message)."""
    from aiohttp import web

    log = logging.getLogger(f"harness_run.{service}")

    @web.middleware
    async def guard(request: web.Request, handler: Handler) -> web.StreamResponse:
        try:
            return await handler(request)
        except web.HTTPException as exc:
            if exc.status < 400 or exc.content_type == "application/json":
                raise
            return _http_error(request, exc, api)
        except Exception as exc:
            body, status = _body_of(exc, request_secrets(request), service, api)
            if status >= 500:
                log.error("%s %s failed: %s", request.method, request.path, body.message)
            return error(status, body.error, body.message, body.field, allow=body.allow)

    return guard


def _body_of(exc: Exception, secrets: list[str], service: str, api: str) -> tuple[ErrorBody, int]:
    """The error table: ``exc`` as an ErrorBody (secret values redacted) and its status."""
    message = redact(str(exc), secrets)
    if isinstance(exc, BodyError):
        where = f"{exc.model} in {api}" if exc.model else api
        return ErrorBody(error="invalid", message=f"{message}; see {where}", field=exc.field), 422
    if isinstance(exc, SpecError):
        field = exc.issues[0].path if exc.issues else None
        return ErrorBody(error="invalid", message=message, field=field), 422
    if isinstance(exc, PermissionDeniedError):
        return ErrorBody(error="forbidden", message=message, field=exc.field, allow=exc.allow), 403
    if isinstance(exc, SessionNotFoundError):
        return ErrorBody(error="not_found", message=message), 404
    if isinstance(exc, SessionBusyError):
        return ErrorBody(error="session_busy", message=message), 409
    if isinstance(exc, UsageError):
        return ErrorBody(error="bad_request", message=message), 400
    if not isinstance(exc, HarnessRunError):
        message = redact(f"the {service} failed: {type(exc).__name__}: {exc}", secrets)
    return ErrorBody(error="internal", message=message), 500


_HTTP_CODES = {404: "not_found", 405: "method_not_allowed", 413: "too_large"}


def _http_error(request: web.Request, exc: web.HTTPException, api: str) -> web.Response:
    """aiohttp's own error answers (no route, a wrong method, a body too large …) as ErrorBody."""
    code = _HTTP_CODES.get(exc.status, "bad_request" if exc.status < 500 else "internal")
    if exc.status == 404:
        message = f"no route {request.method} {request.path}; see {api}"
    elif exc.status == 405:
        message = f"{request.method} is not allowed on {request.path}; see {api}"
    elif exc.status == 413:
        message = f"the body is over the {MAX_BODY // (1 << 20)} MiB this server accepts; send less"
    else:
        message = f"{exc.status} {exc.reason}"
    return error(exc.status, code, message)


def read_error(text: str) -> ErrorBody:
    """An error answer's :class:`ErrorBody` (a client's view); any other text is the message (its
    first 500 characters), with an empty code."""
    try:
        parsed: object = json.loads(text)
    except ValueError:
        parsed = None
    fields = cast("dict[str, Any]", parsed) if isinstance(parsed, dict) else {}
    message = fields.get("message")

    def text_of(key: str) -> str | None:
        value = fields.get(key)
        return str(value) if value else None

    return ErrorBody(
        error=text_of("error") or "",
        message=str(message) if message else text[:500],
        field=text_of("field"),
        allow=text_of("allow"),
    )
