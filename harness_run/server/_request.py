"""What a request handler reaches: the app's parts (state, keys, secret, spend, settings) and the
path's session as the caller may see it (scope and owner checked: another key's session is a 404)."""

from __future__ import annotations

import asyncio
import logging

from aiohttp import web

from harness_run.errors import UsageError
from harness_run.runtime import Session
from harness_run.server._access import require, visible
from harness_run.server._keys import KeyStore
from harness_run.server._spend import KeySpend
from harness_run.server._state import ServerState
from harness_run.store import ApprovalStore, KeyScope

__all__ = [
    "ALLOW_EXEC",
    "KEYS",
    "SECRET",
    "SPEND",
    "STATE",
    "approval_store",
    "audit_log",
    "server_state",
    "session_of",
]

STATE: web.AppKey[ServerState] = web.AppKey("state", ServerState)
KEYS: web.AppKey[KeyStore] = web.AppKey("keys", KeyStore)
SECRET: web.AppKey[bytes] = web.AppKey("secret", bytes)
SPEND: web.AppKey[KeySpend] = web.AppKey("spend", KeySpend)
ALLOW_EXEC: web.AppKey[bool] = web.AppKey("allow_exec", bool)

audit_log = logging.getLogger("harness_run.server.audit")
"""Exec commands (redacted), session deletions, approval decisions and key changes, by key id."""


def server_state(request: web.Request) -> ServerState:
    return request.app[STATE]


async def session_of(request: web.Request, scope: KeyScope = "read") -> Session:
    """The path's session, if the caller's key has ``scope`` and may see it (else 404 as unknown)."""
    record = require(request, scope)
    sid = request.match_info["session_id"]
    session = await asyncio.to_thread(server_state(request).session, sid)
    visible(record, session.record, sid)
    return session


def approval_store(state: ServerState) -> ApprovalStore:
    store = state.store
    if not isinstance(store, ApprovalStore):
        raise UsageError(f"this server's history store ({type(store).__name__}) keeps no approvals")
    return store
