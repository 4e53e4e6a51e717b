"""The server's HTTP app (aiohttp.web, as the in-image worker): auth, routes, SSE streams.

Every handler is a few lines over :class:`~harness_run.server._state.ServerState` and the library's
own Engine/Session/Run: no turn is implemented here. The HarnessBox paths (``/v1/workspaces``) are
aliases over the same handlers.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from aiohttp import web

from harness_run.errors import (
    PermissionDeniedError,
    SessionBusyError,
    redact,
)
from harness_run.runtime import Session
from harness_run.runtime.local import LocalEngine
from harness_run.runtime.server_client import (
    CreateSession,
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
    parse_event_id,
)
from harness_run.server._access import CALLER, grants, may_see, require
from harness_run.server._approval_routes import decide, get_approval, list_approvals
from harness_run.server._boxes import add_box_routes
from harness_run.server._dashboard import add_dashboard
from harness_run.server._keys import KeyStore, server_secret
from harness_run.server._limits import TooManyStreams, stream_limits
from harness_run.server._middleware import access, authenticate, guard_errors, trace
from harness_run.server._openapi import openapi_document
from harness_run.server._policy import served_spec
from harness_run.server._request import (
    ALLOW_EXEC,
    KEYS,
    SECRET,
    SPEND,
    STATE,
    audit_log,
    server_state,
    session_of,
)
from harness_run.server._spend import KeySpend, period_start
from harness_run.server._state import ServerState
from harness_run.store import ApprovalStore, EngineRecord, SessionRecord
from harness_run.vocab.version import __version__
from harness_run.web import Handler, error, json_response, new_app, read_body, stream_events

__all__ = ["make_app"]


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
    state = server_state(request)
    full = grants(require(request, "read"), "admin")
    records = await asyncio.to_thread(
        lambda: [_engine_record(state, name, full) for name in sorted(state.engines)]
    )
    return json_response(EngineList(engines=records))


async def _engine(request: web.Request) -> web.Response:
    full = grants(require(request, "read"), "admin")
    name = request.match_info["name"]
    return json_response(await asyncio.to_thread(_engine_record, server_state(request), name, full))


async def _versions(request: web.Request) -> web.Response:
    full = grants(require(request, "read"), "admin")
    engine = server_state(request).engine(request.match_info["name"])
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
    state = server_state(request)
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
    state = server_state(request)
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


async def _get_session(request: web.Request) -> web.Response:
    return json_response(server_state(request).live_record(await session_of(request)))


async def _delete_session(request: web.Request) -> web.Response:
    """Through ``Engine.delete_session``: workspace, transcript, checkpoints and container or claim
    go with the history; 409 while a turn runs (interrupt it first)."""
    session = await session_of(request, "turn")
    state = server_state(request)
    engine = state.engine(session.record.engine)
    await asyncio.to_thread(engine.delete_session, session.session_id)
    audit_log.info("key=%s deleted session=%s", request[CALLER].key_id, session.session_id)
    return web.Response(status=204)


async def _history(request: web.Request) -> web.Response:
    session = await session_of(request)
    return json_response(TurnList(turns=await asyncio.to_thread(session.history)))


# --- turns --------------------------------------------------------------------------------------


async def _start_turn(request: web.Request) -> web.StreamResponse:
    """Start the next turn: JSON :class:`TurnStarted`, or its events as SSE when the client accepts
    ``text/event-stream`` (always for the HarnessBox ``prompt`` path)."""
    body = await read_body(request, TurnRequest)
    session = await session_of(request, "turn")
    policy = server_state(request).policy
    spec = served_spec(server_state(request).engine(session.record.engine))
    remote = policy.is_remote(request.remote)
    policy.check_turn(spec, session.record.config, body.config, body.secrets, remote=remote)
    key = request[CALLER]
    spend = request.app[SPEND]
    # what the turn may spend is held against the key's budget (403 once it is spent)
    held = await asyncio.to_thread(spend.take, key, _turn_budget(session, body.config))
    config = body.config if held is None else {**(body.config or {}), "max_budget_usd": held}
    asked = time.time()
    try:  # a new turn (409 while one runs: steer it with /steer); a retried message_id returns its turn
        run = await session.start(
            body.prompt, secrets=body.secrets, config=config, message_id=body.message_id
        )
    except BaseException:
        if held is not None:
            spend.settle(key.key_id, held, asked, None)
        raise
    server_state(request).started(session, run)
    if held is not None and run.started_at < asked:  # a retried message: no new turn, nothing spent
        spend.settle(key.key_id, held, asked, None)
    elif held is not None:
        run_task = asyncio.ensure_future(run.wait())
        run_task.add_done_callback(
            lambda _: spend.settle(
                key.key_id, held, run.started_at, run.result.cost_usd if run.result else None
            )
        )
    wants_sse = "text/event-stream" in request.headers.get("Accept", "") or request.path.endswith("/prompt")
    if not wants_sse:
        return json_response(
            TurnStarted(session_id=session.session_id, turn=run.turn, message_id=run.message_id)
        )
    events = server_state(request).events(session, (run.turn, -1), until_result=True)
    return await stream_events(request, events)


def _turn_budget(session: Session, config: dict[str, Any] | None) -> float | None:
    """The turn's own budget (its config's, else the session's): a turn that would cross the key's
    budget gets what is left as its budget instead, so it stops at it as a turn budget does."""
    current = (config or {}).get("max_budget_usd", session.spec.max_budget_usd)
    return float(current) if isinstance(current, (int, float)) else None


async def _steer(request: web.Request) -> web.Response:
    body = await read_body(request, SteerRequest)
    run = (await session_of(request, "turn")).current_run
    delivered = run is not None and not run.done and await run.steer(body.text, body.message_id)
    return json_response(Steered(delivered=delivered))


async def _interrupt(request: web.Request) -> web.Response:
    session = await session_of(request, "turn")
    running = session.current_run is not None and not session.current_run.done
    await session.interrupt()
    return json_response(Interrupted(interrupted=running))


async def _exec(request: web.Request) -> web.Response:
    body = await read_body(request, ExecRequest)
    session = await session_of(request, "exec")
    engine = server_state(request).engine(session.record.engine)
    if isinstance(engine, LocalEngine) and not request.app[ALLOW_EXEC]:
        raise PermissionDeniedError(
            f"exec on engine {session.record.engine!r} would run on the server's own host; the "
            "operator has not allowed that",
            allow="harness-run serve --allow-exec (read docs/team-server.md first)",
        )
    server_state(request).policy.check_exec(body.secrets)
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
    session = await session_of(request)
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
        return await stream_events(request, server_state(request).events(session, after))


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
    ("GET", "/v1/sessions/{session_id}/approvals", list_approvals),
    ("GET", "/v1/sessions/{session_id}/approvals/{request_id}", get_approval),
    ("POST", "/v1/sessions/{session_id}/approvals/{request_id}", decide),
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
    app = new_app(trace, access, guard_errors, authenticate)
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
