"""Request bodies: JSON objects validated by a pydantic model, read the same way by the team server
and the worker. A body that cannot be used raises :class:`BodyError` (answered 422 ``invalid``);
one over :data:`MAX_BODY` is aiohttp's 413 (``too_large``). A body's secret values are kept on the
request, to be redacted from whatever it answers."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, cast

from pydantic import BaseModel, ValidationError

if TYPE_CHECKING:
    from aiohttp import web

__all__ = ["MAX_BODY", "BodyError", "read_body", "request_secrets"]

MAX_BODY = 16 * 1024 * 1024
"""The largest request body accepted (bytes): a larger one is answered 413 ``too_large``."""

_TOO_DEEP = "the body nests too deeply; send a flat JSON object"


class BodyError(Exception):
    """A request body that cannot be used: not JSON, not an object, nested too deeply, or not
    valid for ``model`` (``field`` names where). Answered 422 ``invalid``."""

    def __init__(self, message: str, field: str | None = None, model: str | None = None) -> None:
        super().__init__(message)
        self.field = field
        self.model = model


def request_secrets(request: web.Request) -> list[str]:
    """The secret values of the request's body (read by :func:`read_body`), to redact."""
    from harness_run.web._keys import SECRETS

    return request.get(SECRETS, [])


def _remember(request: web.Request, secrets: list[str]) -> None:
    from harness_run.web._keys import SECRETS

    request[SECRETS] = secrets


async def read_body[M: BaseModel](request: web.Request, model: type[M]) -> M:
    """The request's JSON body as ``model`` (no body: ``{}``). Its ``secrets`` values, if any, are
    redacted from whatever the request answers. Raises :class:`BodyError` for a body that is not
    UTF-8 JSON, not an object, nested deeper than the parser goes (the interpreter's recursion
    limit), or not valid for ``model`` (``field`` naming the first problem)."""
    name = model.__name__
    raw = await request.read() if request.can_read_body else b""  # 413 beyond the app's MAX_BODY
    try:
        data: object = json.loads(raw.decode()) if raw else {}
    except UnicodeDecodeError:
        raise BodyError("the body is not JSON (not UTF-8 text); send a JSON object", model=name) from None
    except ValueError as exc:  # JSONDecodeError, or a number beyond int's digit limit
        why = exc.msg if isinstance(exc, json.JSONDecodeError) else str(exc)
        raise BodyError(f"the body is not JSON ({why}); send a JSON object", model=name) from None
    except RecursionError:
        raise BodyError(_TOO_DEEP, model=name) from None
    if not isinstance(data, dict):
        raise BodyError(f"the body must be a JSON object, not {_kind(data)}", model=name)
    body = cast("dict[str, object]", data)
    secrets = body.get("secrets")
    if isinstance(secrets, dict):
        values = cast("dict[str, object]", secrets).values()
        _remember(request, [value for value in values if isinstance(value, str)])
    try:
        return model.model_validate(body)
    except RecursionError:
        raise BodyError(_TOO_DEEP, model=name) from None
    except ValidationError as exc:
        first = exc.errors()[0]
        field = ".".join(str(part) for part in first["loc"]) or None
        raise BodyError(f"{field or 'body'}: {first['msg']}", field, name) from None


def _kind(data: object) -> str:
    if isinstance(data, list):
        return "an array"
    if isinstance(data, str):
        return "a string"
    if data is None:
        return "null"
    return "a number" if isinstance(data, int | float) and not isinstance(data, bool) else "true/false"
