"""The approval routes: a session's requests (``GET /v1/sessions/{id}/approvals[/{request_id}]``)
and a person's decision (``POST``): the owner (or an admin) with the ``turn`` scope; the first
decision wins and records the deciding key."""

from __future__ import annotations

import asyncio
import time

from aiohttp import web

from harness_run.errors import ApprovalNotFoundError, UsageError
from harness_run.runtime.server_client import ApprovalList, Decision
from harness_run.server._access import CALLER
from harness_run.server._request import approval_store, audit_log, server_state, session_of
from harness_run.web import error, json_response, read_body

__all__ = ["decide", "get_approval", "list_approvals"]


async def list_approvals(request: web.Request) -> web.Response:
    """The session's approval requests and questions: the current turn's (``?turn=N``, ``all``),
    ``?pending=1`` only those still waiting."""
    session = await session_of(request)
    pending = request.query.get("pending", "") in ("1", "true")
    wanted = request.query.get("turn")
    if wanted is not None and wanted != "all" and not wanted.isdigit():
        return error(422, "invalid", f"turn: {wanted!r} is not a turn number or 'all'", "turn")
    if pending:  # settles the requests of a turn whose process died (denied, and the store says so)
        found = await asyncio.to_thread(session.pending_approvals)
    else:
        found = await asyncio.to_thread(
            approval_store(server_state(request)).list_approvals, session.session_id
        )
    if wanted is None and not pending:  # the running turn's, else the last one's
        run = session.current_run
        wanted = str(
            run.turn if run is not None and not run.done else max((a.turn for a in found), default=0)
        )
    if wanted is not None and wanted != "all":
        found = [a for a in found if a.turn == int(wanted)]
    return json_response(ApprovalList(approvals=found))


async def get_approval(request: web.Request) -> web.Response:
    session = await session_of(request)
    rid = request.match_info["request_id"]
    found = await asyncio.to_thread(
        approval_store(server_state(request)).get_approval, session.session_id, rid
    )
    if found is None:
        return _no_request(session.session_id, rid)
    return json_response(found)


def _no_request(sid: str, rid: str) -> web.Response:
    return error(404, "not_found", f"session {sid} has no approval request {rid!r}; GET its /approvals")


async def decide(request: web.Request) -> web.Response:
    """Allow or deny a waiting tool call, or answer a question: the session's owner (or an admin)
    with the ``turn`` scope; the first decision wins, and records the deciding key."""
    body = await read_body(request, Decision)
    session = await session_of(request, "turn")
    rid = request.match_info["request_id"]
    key = request[CALLER].key_id
    try:
        if body.answer is not None:
            decided = await session.answer(rid, body.answer, key_id=key)
        elif body.decision == "allow":
            decided = await session.approve(rid, key_id=key)
        else:
            decided = await session.deny(rid, body.reason, key_id=key)
    except ApprovalNotFoundError:
        return _no_request(session.session_id, rid)
    except UsageError as exc:  # decided already or expired: 409 (the first decision won)
        found = await asyncio.to_thread(
            approval_store(server_state(request)).get_approval, session.session_id, rid
        )
        if found is None or (found.pending and found.expires_at > time.time()):
            raise
        return error(409, "decided", str(exc))
    audit_log.info(
        "key=%s %s session=%s request=%s",
        key,
        "answered" if body.answer is not None else body.decision,
        session.session_id,
        rid,
    )
    return json_response(decided)
