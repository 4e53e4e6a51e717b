"""The server's HTTP app (aiohttp.web, as the in-image worker): auth, routes, SSE streams.

Every handler is a few lines over :class:`~harness_run.server._state.ServerState` and the library's
own Engine/Session/Run: no turn is implemented here. The HarnessBox paths (``/v1/workspaces``) are
aliases over the same handlers.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncGenerator
from typing import Any

from aiohttp import web

from harness_run.errors import (
    ApprovalNotFoundError,
    PermissionDeniedError,
    SessionBusyError,
    UsageError,
    redact,
)
from harness_run.events import AgentEvent
from harness_run.runtime import Session
from harness_run.runtime.http import (
    ApprovalList,
    CreateSession,
    Decision,
    EngineList,
    ExecOutput,
    ExecRequest,
    Health,
    Interrupted,
    KeyInfo,
    SessionList,
    Steered,
    SteerRequest,
    TurnList,
    TurnRequest,
    TurnStarted,
    WorkspaceRequest,
    event_id,
    parse_event_id,
)
from harness_run.runtime.local import LocalEngine
from harness_run.server._access import CALLER, grants, may_see, require, visible
from harness_run.server._boxes import add_box_routes
from harness_run.server._dashboard import DASHBOARD_PATHS, add_dashboard
from harness_run.server._errors import Handler, error, guard_errors, json_response, read_body
from harness_run.server._keys import KeyStore, check_key, server_secret
from harness_run.server._limits import TooManyStreams, auth_failures, stream_limits
from harness_run.server._openapi import openapi_document
from harness_run.server._policy import served_spec
from harness_run.server._spend import KeySpend, period_start
from harness_run.server._state import ServerState
from harness_run.store import ApprovalStore, EngineRecord, KeyScope, SessionRecord
from harness_run.vocab import telemetry
from harness_run.vocab.version import __version__

__all__ = ["make_app"]

STATE: web.AppKey[ServerState] = web.AppKey("state", ServerState)
KEYS: web.AppKey[KeyStore] = web.AppKey("keys", KeyStore)
SECRET: web.AppKey[bytes] = web.AppKey("secret", bytes)
SPEND: web.AppKey[KeySpend] = web.AppKey("spend", KeySpend)
ALLOW_EXEC: web.AppKey[bool] = web.AppKey("allow_exec", bool)
_OPEN = frozenset({"/healthz", "/openapi.json", *DASHBOARD_PATHS})  # the dashboard's files hold no data

access_log = logging.getLogger("harness_run.server.access")
audit_log = logging.getLogger("harness_run.server.audit")


@web.middleware
async def _trace(request: web.Request, handler: Handler) -> web.StreamResponse:
    """A server span per request, continuing the client's trace (W3C ``traceparent``); 5xx count
    as errors in the metrics. Nothing at all when telemetry is off."""
    return await telemetry.serve_request(
        request.method,
        _route(request),
        request.headers,
        "harness_run.server",
        lambda: handler(request),
        errors_metric="harness_run.server.errors",
    )


def _route(request: web.Request) -> str:
    resource = request.match_info.route.resource
    return resource.canonical if resource is not None else "unmatched"


@web.middleware
async def _access(request: web.Request, handler: Handler) -> web.StreamResponse:
    """One access line per request: key id (never the key), method, route, session, status, ms."""
    started = time.monotonic()
    status = 500
    try:
        response = await handler(request)
        status = response.status
        return response
    except web.HTTPException as exc:
        status = exc.status
        raise
    finally:
        if request.path not in DASHBOARD_PATHS:
            record = request.get(CALLER)
            access_log.info(
                "key=%s %s %s session=%s status=%d ms=%.1f",
                record.key_id if record is not None else "-",
                request.method,
                _route(request),
                request.match_info.get("session_id", "-"),
                status,
                (time.monotonic() - started) * 1000,
            )


@web.middleware
async def _auth(request: web.Request, handler: Handler) -> web.StreamResponse:
    if request.path in _OPEN:
        return await handler(request)
    header = request.headers.get("Authorization")
    app = request.app
    failures = auth_failures(app)  # repeated 401s from one address: 429 for a cool-down
    record = await asyncio.to_thread(check_key, app[KEYS], header, app[SECRET])
    if record is None:
        # a good key still works from a cooling-down address (a shared NAT, Cloud Run's front
        # end): the key check itself is cheap (unknown ids are refused from the cached id set)
        if failures.blocked(request.remote):
            return failures.response()
        failures.failed(request.remote)
        return error(
            401,
            "unauthorized",
            "missing, wrong or revoked API key: send 'Authorization: Bearer <key>' with a key from "
            "`harness-run serve keys create`",
        )
    request[CALLER] = record
    return await handler(request)


def _state(request: web.Request) -> ServerState:
    return request.app[STATE]


async def _session(request: web.Request, scope: KeyScope = "read") -> Session:
    """The path's session, if the caller's key has ``scope`` and may see it (else 404 as unknown)."""
    record = require(request, scope)
    sid = request.match_info["session_id"]
    session = await asyncio.to_thread(_state(request).session, sid)
    visible(record, session.record, sid)
    return session


# --- engines ------------------------------------------------------------------------------------


async def _health(request: web.Request) -> web.Response:
    return json_response(Health())


async def _openapi(request: web.Request) -> web.Response:
    return web.json_response(openapi_document())


def _engine_record(state: ServerState, name: str, full: bool) -> EngineRecord:
    engine = state.engine(name)
    versions = engine.versions()
    current = [v for v in versions if v.version == engine.version]
    record = (current or versions)[-1]
    return record if full else _summary(record)


_SUMMARY_FIELDS = (
    "name",
    "harness",
    "model",
    "extra_harnesses",
    "secrets",
    "allowed_tools",
    "disallowed_tools",
    "permission_mode",
    "max_turns",
    "max_budget_usd",
    "reasoning_effort",
    "output_schema",
    "checkpoint",
    "timeout",
    "security_policy",
)
"""What a non-admin key sees of an engine's spec: what a client needs to call it (the secret names
a run takes, the harnesses, the limits), not its prompt, repos, MCP servers, env or setup."""


def _summary(record: EngineRecord) -> EngineRecord:
    spec = record.spec
    return record.model_copy(update={"spec": {k: spec[k] for k in _SUMMARY_FIELDS if k in spec}})


async def _engines(request: web.Request) -> web.Response:
    state = _state(request)
    full = grants(require(request, "read"), "admin")
    records = await asyncio.to_thread(
        lambda: [_engine_record(state, name, full) for name in sorted(state.engines)]
    )
    return json_response(EngineList(engines=records))


async def _engine(request: web.Request) -> web.Response:
    full = grants(require(request, "read"), "admin")
    name = request.match_info["name"]
    return json_response(await asyncio.to_thread(_engine_record, _state(request), name, full))


async def _versions(request: web.Request) -> web.Response:
    full = grants(require(request, "read"), "admin")
    engine = _state(request).engine(request.match_info["name"])
    versions = await asyncio.to_thread(engine.versions)
    return json_response(EngineList(engines=versions if full else [_summary(v) for v in versions]))


async def _me(request: web.Request) -> web.Response:
    record = require(request, "read")
    spent = await asyncio.to_thread(request.app[SPEND].spent, record)
    return json_response(
        KeyInfo(
            key_id=record.key_id,
            name=record.name,
            scopes=list(record.scopes),
            budget_usd=record.budget_usd,
            budget_per=record.budget_per,
            spent_usd=round(spent, 6),
            period_start=period_start(record.budget_per),
            server_version=__version__,
        )
    )


# --- sessions -----------------------------------------------------------------------------------


async def _create_session(request: web.Request) -> web.Response:
    body = await read_body(request, CreateSession)
    return await _start_session(request, request.match_info["name"], body)


async def _create_workspace(request: web.Request) -> web.Response:
    body = await read_body(request, WorkspaceRequest)
    return await _start_session(request, body.engine, body)


async def _start_session(request: web.Request, name: str | None, body: CreateSession) -> web.Response:
    record = require(request, "turn")
    state = _state(request)
    engine = state.engine(name)
    remote = state.policy.is_remote(request.remote)
    state.policy.check_session(served_spec(engine), body.config, remote=remote)
    sid = str(body.session_id) if body.session_id is not None else None

    def start() -> SessionRecord:
        if sid is not None and state.store.get_session(sid) is not None:
            raise SessionBusyError(f"session id {sid} is taken; leave session_id out to get a new one")
        session = engine.start_session(body.config, session_id=sid)
        owned = state.store.update_session(
            session.session_id, lambda r: r.model_copy(update={"owner": record.key_id})
        )
        if owned is not None:
            session.refresh(owned)
        return state.live_record(session)

    return json_response(await asyncio.to_thread(start), status=201)


async def _list_sessions(request: web.Request) -> web.Response:
    record = require(request, "read")
    state = _state(request)
    engine = request.query.get("engine")
    if engine is not None:
        state.engine(engine)  # 404 for an engine not served
    stored = await asyncio.to_thread(state.store.list_sessions, engine)
    records = [state.listed(r) for r in stored if r.engine in state.engines and may_see(record, r)]
    waiting = await asyncio.to_thread(_waiting, state, records)
    listed = SessionList(sessions=records, approvals=waiting)
    text = listed.model_dump_json(exclude=None if waiting else {"approvals"})  # only when any wait
    return web.Response(text=text, content_type="application/json")


def _waiting(state: ServerState, records: list[SessionRecord]) -> dict[str, int]:
    """Pending approvals of the listed running sessions (only they can have any)."""
    store = state.store
    if not isinstance(store, ApprovalStore):
        return {}
    counts = {
        r.session_id: len(store.list_approvals(r.session_id, pending=True))
        for r in records
        if r.status == "running"
    }
    return {sid: n for sid, n in counts.items() if n}


def _approval_store(state: ServerState) -> ApprovalStore:
    store = state.store
    if not isinstance(store, ApprovalStore):
        raise UsageError(f"this server's history store ({type(store).__name__}) keeps no approvals")
    return store


async def _get_session(request: web.Request) -> web.Response:
    return json_response(_state(request).live_record(await _session(request)))


async def _delete_session(request: web.Request) -> web.Response:
    """Through ``Engine.delete_session``: workspace, transcript, checkpoints and container or claim
    go with the history; 409 while a turn runs (interrupt it first)."""
    session = await _session(request, "turn")
    state = _state(request)
    engine = state.engine(session.record.engine)
    await asyncio.to_thread(engine.delete_session, session.session_id)
    audit_log.info("key=%s deleted session=%s", request[CALLER].key_id, session.session_id)
    return web.Response(status=204)


async def _history(request: web.Request) -> web.Response:
    session = await _session(request)
    return json_response(TurnList(turns=await asyncio.to_thread(session.history)))


# --- turns --------------------------------------------------------------------------------------


async def _start_turn(request: web.Request) -> web.StreamResponse:
    """Start the next turn: JSON :class:`TurnStarted`, or its events as SSE when the client accepts
    ``text/event-stream`` (always for the HarnessBox ``prompt`` path)."""
    body = await read_body(request, TurnRequest)
    session = await _session(request, "turn")
    policy = _state(request).policy
    spec = served_spec(_state(request).engine(session.record.engine))
    remote = policy.is_remote(request.remote)
    policy.check_turn(spec, session.record.config, body.config, body.secrets, remote=remote)
    key = request[CALLER]
    spend = request.app[SPEND]
    left = await asyncio.to_thread(spend.remaining, key)  # 403 once the key's budget is spent
    config = _capped(session, body.config, left)
    # a new turn (409 while one runs: steer it with /steer); a retried message_id returns its turn
    run = await session.start(body.prompt, secrets=body.secrets, config=config, message_id=body.message_id)
    _state(request).started(session, run)
    if key.budget_usd is not None:
        run_task = asyncio.ensure_future(run.wait())
        run_task.add_done_callback(
            lambda _: spend.add(key.key_id, run.started_at, run.result.cost_usd if run.result else None)
        )
    wants_sse = "text/event-stream" in request.headers.get("Accept", "") or request.path.endswith("/prompt")
    if not wants_sse:
        return json_response(
            TurnStarted(session_id=session.session_id, turn=run.turn, message_id=run.message_id)
        )
    events = _state(request).events(session, (run.turn, -1), until_result=True)
    return await _stream(request, events)


def _capped(session: Session, config: dict[str, Any] | None, left: float | None) -> dict[str, Any] | None:
    """The turn's config with its budget lowered to what the key has left: a turn that would cross
    the key's budget stops at it, as a turn budget does."""
    if left is None:
        return config
    current = (config or {}).get("max_budget_usd", session.spec.max_budget_usd)
    budget = left if not isinstance(current, (int, float)) else min(float(current), left)
    return {**(config or {}), "max_budget_usd": budget}


async def _steer(request: web.Request) -> web.Response:
    body = await read_body(request, SteerRequest)
    run = (await _session(request, "turn")).current_run
    delivered = run is not None and not run.done and await run.steer(body.text, body.message_id)
    return json_response(Steered(delivered=delivered))


async def _interrupt(request: web.Request) -> web.Response:
    session = await _session(request, "turn")
    running = session.current_run is not None and not session.current_run.done
    await session.interrupt()
    return json_response(Interrupted(interrupted=running))


async def _exec(request: web.Request) -> web.Response:
    body = await read_body(request, ExecRequest)
    session = await _session(request, "exec")
    engine = _state(request).engine(session.record.engine)
    if isinstance(engine, LocalEngine) and not request.app[ALLOW_EXEC]:
        raise PermissionDeniedError(
            f"exec on engine {session.record.engine!r} would run on the server's own host; the "
            "operator has not allowed that",
            allow="harness-run serve --allow-exec (read docs/team-server.md first)",
        )
    _state(request).policy.check_exec(body.secrets)
    audit_log.info(
        "key=%s exec session=%s command=%s",
        request[CALLER].key_id,
        session.session_id,
        redact(body.command, body.secrets)[:500],
    )
    result = await session.exec(
        body.command, secrets=body.secrets or None, timeout=body.timeout, max_output=body.max_output
    )
    return json_response(
        ExecOutput(
            exit_code=result.exit_code, stdout=result.stdout, stderr=result.stderr, truncated=result.truncated
        )
    )


async def _events(request: web.Request) -> web.StreamResponse:
    """The session's events after ``Last-Event-ID``/``?after=`` (stored, then live), as SSE."""
    session = await _session(request)
    raw = request.headers.get("Last-Event-ID") or request.query.get("after")
    try:
        after = parse_event_id(raw)
    except ValueError:
        return error(422, "invalid", f"after: {raw!r} is not an event id (<turn>:<seq>)", "after")
    if request.query.get("format") == "json":  # the stored log, as a list
        logged = [event.model_dump(mode="json") for event in await asyncio.to_thread(session.events)]
        return web.json_response({"events": logged})
    try:  # streams per key and per session are capped (429 naming the cap)
        held = stream_limits(request.app).acquire(request[CALLER].key_id, session.session_id)
    except TooManyStreams as exc:
        return exc.response()
    with held:
        return await _stream(request, _state(request).events(session, after))


async def _stream(request: web.Request, events: AsyncGenerator[AgentEvent | None]) -> web.StreamResponse:
    response = web.StreamResponse(
        headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
    )
    await response.prepare(request)
    try:
        async for event in events:
            if event is None:
                await response.write(b": keepalive\n\n")
                continue
            head = f"event: {event.type}\n"  # a delta moves no resume point: no id
            if event.type != "delta":
                head = f"id: {event_id(event.turn, event.seq)}\n{head}"
            await response.write(f"{head}data: {event.model_dump_json()}\n\n".encode())
        with contextlib.suppress(ConnectionResetError):
            await response.write_eof()
    except ConnectionResetError:
        pass  # the client went away; it resumes with Last-Event-ID
    finally:
        with contextlib.suppress(Exception):
            await events.aclose()
    return response


# --- approvals ------------------------------------------------------------------------------------


async def _approvals(request: web.Request) -> web.Response:
    """The session's approval requests and questions: the current turn's (``?turn=N``, ``all``),
    ``?pending=1`` only those still waiting."""
    session = await _session(request)
    pending = request.query.get("pending", "") in ("1", "true")
    wanted = request.query.get("turn")
    if wanted is not None and wanted != "all" and not wanted.isdigit():
        return error(422, "invalid", f"turn: {wanted!r} is not a turn number or 'all'", "turn")
    if pending:  # settles the requests of a turn whose process died (denied, and the store says so)
        found = await asyncio.to_thread(session.pending_approvals)
    else:
        found = await asyncio.to_thread(_approval_store(_state(request)).list_approvals, session.session_id)
    if wanted is None and not pending:  # the running turn's, else the last one's
        run = session.current_run
        wanted = str(
            run.turn if run is not None and not run.done else max((a.turn for a in found), default=0)
        )
    if wanted is not None and wanted != "all":
        found = [a for a in found if a.turn == int(wanted)]
    return json_response(ApprovalList(approvals=found))


async def _approval(request: web.Request) -> web.Response:
    session = await _session(request)
    rid = request.match_info["request_id"]
    found = await asyncio.to_thread(_approval_store(_state(request)).get_approval, session.session_id, rid)
    if found is None:
        return _no_request(session.session_id, rid)
    return json_response(found)


def _no_request(sid: str, rid: str) -> web.Response:
    return error(404, "not_found", f"session {sid} has no approval request {rid!r}; GET its /approvals")


async def _decide(request: web.Request) -> web.Response:
    """Allow or deny a waiting tool call, or answer a question: the session's owner (or an admin)
    with the ``turn`` scope; the first decision wins, and records the deciding key."""
    body = await read_body(request, Decision)
    session = await _session(request, "turn")
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
            _approval_store(_state(request)).get_approval, session.session_id, rid
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


# --- the app ------------------------------------------------------------------------------------

ROUTES: list[tuple[str, str, Handler]] = [
    ("GET", "/healthz", _health),
    ("GET", "/openapi.json", _openapi),
    ("GET", "/v1/engines", _engines),
    ("GET", "/v1/engines/{name}", _engine),
    ("GET", "/v1/engines/{name}/versions", _versions),
    ("GET", "/v1/keys/me", _me),
    ("POST", "/v1/engines/{name}/sessions", _create_session),
    ("GET", "/v1/sessions", _list_sessions),
    ("GET", "/v1/sessions/{session_id}", _get_session),
    ("DELETE", "/v1/sessions/{session_id}", _delete_session),
    ("GET", "/v1/sessions/{session_id}/history", _history),
    ("POST", "/v1/sessions/{session_id}/turns", _start_turn),
    ("GET", "/v1/sessions/{session_id}/events", _events),
    ("POST", "/v1/sessions/{session_id}/steer", _steer),
    ("POST", "/v1/sessions/{session_id}/interrupt", _interrupt),
    ("POST", "/v1/sessions/{session_id}/exec", _exec),
    ("GET", "/v1/sessions/{session_id}/approvals", _approvals),
    ("GET", "/v1/sessions/{session_id}/approvals/{request_id}", _approval),
    ("POST", "/v1/sessions/{session_id}/approvals/{request_id}", _decide),
    # HarnessBox aliases over the same handlers
    ("POST", "/v1/workspaces", _create_workspace),
    ("GET", "/v1/workspaces", _list_sessions),
    ("DELETE", "/v1/workspaces/{session_id}", _delete_session),
    ("POST", "/v1/workspaces/{session_id}/prompt", _start_turn),
    ("GET", "/v1/workspaces/{session_id}/events", _events),
]
"""(method, path, handler): the routes, also read by the OpenAPI document."""


def make_app(
    state: ServerState, keys: KeyStore, *, secret: bytes | None = None, allow_exec: bool = False
) -> web.Application:
    """The server app over ``state``, with API keys checked in ``keys`` (records sealed under
    ``secret``, default :func:`server_secret`), and the web dashboard at ``/``. ``allow_exec``: let
    ``exec``-scoped keys run commands on engines whose agent shares this host (local engines). No
    CORS headers are sent: browsers on other origins cannot call it."""
    app = web.Application(
        middlewares=[_trace, _access, guard_errors, _auth], client_max_size=16 * 1024 * 1024
    )
    app[STATE] = state
    app[KEYS] = keys
    app[SECRET] = secret if secret is not None else server_secret()
    app[SPEND] = KeySpend(state.store)
    app[ALLOW_EXEC] = allow_exec
    for method, path, handler in ROUTES:
        app.router.add_route(method, path, handler)
    add_box_routes(app, state)
    add_dashboard(app)
    return app
