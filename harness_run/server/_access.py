"""Who is calling, and what their key lets them do: scopes and session ownership.

The auth middleware puts the caller's live key record at ``request[CALLER]``. Scopes nest
(``read`` < ``turn`` < ``exec`` < ``admin``). A session belongs to the key that made it; another
key's session is answered as if it did not exist (404, never 403), unless the caller is ``admin``.
"""

from __future__ import annotations

from aiohttp import web

from harness_run.errors import PermissionDeniedError, SessionNotFoundError
from harness_run.store import ApiKeyRecord, KeyScope, SessionRecord

__all__ = ["CALLER", "SCOPES", "caller", "grants", "may_see", "require", "visible"]

CALLER: web.RequestKey[ApiKeyRecord] = web.RequestKey("caller", ApiKeyRecord)
"""The request's key record (set by the auth middleware on every authenticated route)."""

SCOPES: tuple[KeyScope, ...] = ("read", "turn", "exec", "admin")
"""The scopes, each including the ones before it."""


def grants(record: ApiKeyRecord, scope: KeyScope) -> bool:
    """Whether ``record``'s scopes include ``scope`` (a wider scope includes the narrower ones)."""
    wanted = SCOPES.index(scope)
    return any(SCOPES.index(s) >= wanted for s in record.scopes)


def caller(request: web.Request) -> ApiKeyRecord:
    return request[CALLER]


def require(request: web.Request, scope: KeyScope) -> ApiKeyRecord:
    """The caller, if its key has ``scope``; else :class:`PermissionDeniedError` (403) naming it."""
    record = request[CALLER]
    if not grants(record, scope):
        raise PermissionDeniedError(
            f"this API key ({record.key_id}) has the scopes {list(record.scopes)}; "
            f"{request.method} {request.path} needs {scope!r}",
            allow=f"harness-run serve keys create --scope {scope}",
        )
    return record


def may_see(record: ApiKeyRecord, session: SessionRecord) -> bool:
    """Whether the key may see and act on ``session``: its owner, or an admin key."""
    return grants(record, "admin") or (session.owner is not None and session.owner == record.key_id)


def visible(record: ApiKeyRecord, session: SessionRecord | None, session_id: str) -> SessionRecord:
    """``session`` if the key may see it; else the same 404 as for a session that does not exist."""
    if session is None or not may_see(record, session):
        raise SessionNotFoundError(f"no session {session_id!r} here; GET /v1/sessions lists them")
    return session
