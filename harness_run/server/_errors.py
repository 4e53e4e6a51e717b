"""Errors as JSON: every failure of a request becomes an :class:`ErrorBody` with its status, never a
traceback, and never a secret value of the request (they are redacted from every message)."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import cast

from aiohttp import web
from pydantic import BaseModel, ValidationError

from harness_run.errors import (
    HarnessRunError,
    PermissionDeniedError,
    SessionBusyError,
    SessionNotFoundError,
    SpecError,
    UsageError,
    redact,
)
from harness_run.runtime.http import ErrorBody

__all__ = ["SECRETS", "error", "guard_errors", "json_response", "read_body"]

log = logging.getLogger("harness_run.server")

SECRETS: web.RequestKey[list[str]] = web.RequestKey("secrets", list[str])
"""The request's secret values (request[SECRETS]), redacted from whatever the request answers or logs."""

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def error(status: int, code: str, message: str, field: str | None = None) -> web.Response:
    body = ErrorBody(error=code, message=message, field=field)
    return web.Response(
        text=body.model_dump_json(exclude_none=True), status=status, content_type="application/json"
    )


def json_response(model: BaseModel, status: int = 200) -> web.Response:
    return web.Response(text=model.model_dump_json(), status=status, content_type="application/json")


class _Invalid(Exception):
    def __init__(self, field: str | None, message: str) -> None:
        super().__init__(message)
        self.field = field


async def read_body[M: BaseModel](request: web.Request, model: type[M]) -> M:
    """The request's JSON body as ``model``; a body that does not validate -> 422 naming the field."""
    try:
        data: object = await request.json() if request.can_read_body else {}
    except (ValueError, UnicodeDecodeError):
        raise _Invalid(
            None, "the body is not JSON; send a JSON object (Content-Type: application/json)"
        ) from None
    except RecursionError:
        raise _Invalid(None, "the body nests too deeply; send a flat JSON object") from None
    if not isinstance(data, dict):
        raise _Invalid(None, f"the body must be a JSON object ({model.__name__}, see /openapi.json)")
    secrets = cast("dict[str, object]", data).get("secrets")
    if isinstance(secrets, dict):
        request[SECRETS] = [v for v in cast("dict[str, object]", secrets).values() if isinstance(v, str)]
    try:
        return model.model_validate(data)
    except RecursionError:
        raise _Invalid(None, "the body nests too deeply; send a flat JSON object") from None
    except ValidationError as exc:
        first = exc.errors()[0]
        field = ".".join(str(p) for p in first["loc"]) or None
        raise _Invalid(field, f"{field or 'body'}: {first['msg']}") from None


@web.middleware
async def guard_errors(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Our errors -> JSON with a status (422/403/404/409/400/500), secret values redacted."""
    values: list[str] = request.get(SECRETS, [])
    try:
        return await handler(request)
    except web.HTTPException as exc:
        if exc.status == 404:
            return error(404, "not_found", f"no route {request.method} {request.path}; see /openapi.json")
        if exc.status == 405:
            return error(405, "method_not_allowed", f"{request.method} is not allowed on {request.path}")
        raise
    except _Invalid as exc:
        return error(422, "invalid", redact(str(exc), request.get(SECRETS, values)), exc.field)
    except SpecError as exc:
        field = exc.issues[0].path if exc.issues else None
        return error(422, "invalid", redact(str(exc), request.get(SECRETS, values)), field)
    except PermissionDeniedError as exc:
        message = redact(str(exc), request.get(SECRETS, values))
        body = ErrorBody(error="forbidden", message=message, field=exc.field, allow=exc.allow)
        return web.Response(
            text=body.model_dump_json(exclude_none=True), status=403, content_type="application/json"
        )
    except HarnessRunError as exc:
        message = redact(str(exc), request.get(SECRETS, values))
        if isinstance(exc, SessionNotFoundError):
            return error(404, "not_found", message)
        if isinstance(exc, SessionBusyError):
            return error(409, "session_busy", message)
        if isinstance(exc, UsageError):
            return error(400, "bad_request", message)
        log.error("%s %s failed: %s", request.method, request.path, message)
        return error(500, "internal", message)
    except Exception as exc:
        message = redact(f"{type(exc).__name__}: {exc}", request.get(SECRETS, values))
        log.error("%s %s failed unexpectedly: %s", request.method, request.path, message)
        return error(500, "internal", f"the server failed: {message}")
