"""The server's HTTP app (aiohttp.web, as the in-image worker): auth, routes, SSE streams.

Every handler is a few lines over :class:`~harness_run.server._state.ServerState` and the library's
own Engine/Session/Run: no turn is implemented here. The HarnessBox paths (``/v1/workspaces``) are
aliases over the same handlers.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncGenerator

from aiohttp import web

from harness_run.events import AgentEvent
from harness_run.runtime import Session
from harness_run.runtime.http import (
    CreateSession,
    EngineList,
    ExecOutput,
    ExecRequest,
    Health,
    Interrupted,
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
from harness_run.server._dashboard import DASHBOARD_PATHS, add_dashboard
from harness_run.server._errors import Handler, error, guard_errors, json_response, read_body
from harness_run.server._keys import KeyStore, check_key
from harness_run.server._openapi import openapi_document
from harness_run.server._state import ServerState
from harness_run.store import EngineRecord
from harness_run.vocab import telemetry
from harness_run.vocab.version import __version__

__all__ = ["make_app"]

STATE: web.AppKey[ServerState] = web.AppKey("state", ServerState)
KEYS: web.AppKey[KeyStore] = web.AppKey("keys", KeyStore)
_OPEN = frozenset({"/healthz", "/openapi.json", *DASHBOARD_PATHS})  # the dashboard's files hold no data


@web.middleware
async def _trace(request: web.Request, handler: Handler) -> web.StreamResponse:
    """A server span per request, continuing the client's trace (W3C ``traceparent``); 5xx count
    as errors in the metrics. Nothing at all when telemetry is off."""
    resource = request.match_info.route.resource
    route = resource.canonical if resource is not None else "unmatched"
    return await telemetry.serve_request(
        request.method,
        route,
        request.headers,
        "harness_run.server",
        lambda: handler(request),
        errors_metric="harness_run.server.errors",
    )


@web.middleware
async def _auth(request: web.Request, handler: Handler) -> web.StreamResponse:
    if (
        request.path not in _OPEN
        and check_key(request.app[KEYS], request.headers.get("Authorization")) is None
    ):
        return error(
            401,
            "unauthorized",
            "missing, wrong or revoked API key: send 'Authorization: Bearer <key>' with a key from "
            "`harness-run serve keys create`",
        )
    return await handler(request)


def _state(request: web.Request) -> ServerState:
    return request.app[STATE]


def _session(request: web.Request) -> Session:
    return _state(request).session(request.match_info["session_id"])


# --- engines ------------------------------------------------------------------------------------


async def _health(request: web.Request) -> web.Response:
    return json_response(Health(version=__version__, engines=sorted(_state(request).engines)))


async def _openapi(request: web.Request) -> web.Response:
    return web.json_response(openapi_document())


def _engine_record(state: ServerState, name: str) -> EngineRecord:
    engine = state.engine(name)
    versions = engine.versions()
    current = [v for v in versions if v.version == engine.version]
    return (current or versions)[-1]


async def _engines(request: web.Request) -> web.Response:
    state = _state(request)
    return json_response(EngineList(engines=[_engine_record(state, name) for name in sorted(state.engines)]))


async def _engine(request: web.Request) -> web.Response:
    return json_response(_engine_record(_state(request), request.match_info["name"]))


async def _versions(request: web.Request) -> web.Response:
    engine = _state(request).engine(request.match_info["name"])
    return json_response(EngineList(engines=engine.versions()))


# --- sessions -----------------------------------------------------------------------------------


async def _create_session(request: web.Request) -> web.Response:
    body = await read_body(request, CreateSession)
    return _start_session(request, request.match_info["name"], body)


async def _create_workspace(request: web.Request) -> web.Response:
    body = await read_body(request, WorkspaceRequest)
    return _start_session(request, body.engine, body)


def _start_session(request: web.Request, name: str | None, body: CreateSession) -> web.Response:
    state = _state(request)
    sid = str(body.session_id) if body.session_id is not None else None
    session = state.engine(name).start_session(body.config, session_id=sid)
    return json_response(state.live_record(session), status=201)


async def _list_sessions(request: web.Request) -> web.Response:
    state = _state(request)
    engine = request.query.get("engine")
    if engine is not None:
        state.engine(engine)  # 404 for an engine not served
    records = [state.listed(r) for r in state.store.list_sessions(engine) if r.engine in state.engines]
    return json_response(SessionList(sessions=records))


async def _get_session(request: web.Request) -> web.Response:
    return json_response(_state(request).live_record(_session(request)))


async def _delete_session(request: web.Request) -> web.Response:
    session = _session(request)
    await session.interrupt()
    delete = getattr(_state(request).store, "delete_session", None)
    if delete is None:
        return error(501, "not_supported", "this history store cannot delete sessions yet")
    delete(session.session_id)
    return web.Response(status=204)


async def _history(request: web.Request) -> web.Response:
    return json_response(TurnList(turns=_session(request).history()))


# --- turns --------------------------------------------------------------------------------------


async def _start_turn(request: web.Request) -> web.StreamResponse:
    """Start the next turn: JSON :class:`TurnStarted`, or its events as SSE when the client accepts
    ``text/event-stream`` (always for the HarnessBox ``prompt`` path)."""
    body = await read_body(request, TurnRequest)
    session = _session(request)
    # a new turn (409 while one runs: steer it with /steer); a retried message_id returns its turn
    run = session.run(body.prompt, secrets=body.secrets, config=body.config, message_id=body.message_id)
    _state(request).started(session, run)
    wants_sse = "text/event-stream" in request.headers.get("Accept", "") or request.path.endswith("/prompt")
    if not wants_sse:
        return json_response(
            TurnStarted(session_id=session.session_id, turn=run.turn, message_id=run.message_id)
        )
    events = _state(request).events(session, (run.turn, -1), until_result=True)
    return await _stream(request, events)


async def _steer(request: web.Request) -> web.Response:
    body = await read_body(request, SteerRequest)
    run = _session(request).current_run
    delivered = run is not None and not run.done and await run.steer(body.text, body.message_id)
    return json_response(Steered(delivered=delivered))


async def _interrupt(request: web.Request) -> web.Response:
    session = _session(request)
    running = session.current_run is not None and not session.current_run.done
    await session.interrupt()
    return json_response(Interrupted(interrupted=running))


async def _exec(request: web.Request) -> web.Response:
    body = await read_body(request, ExecRequest)
    result = await _session(request).exec(
        body.command, secrets=body.secrets or None, timeout=body.timeout, max_output=body.max_output
    )
    return json_response(
        ExecOutput(
            exit_code=result.exit_code, stdout=result.stdout, stderr=result.stderr, truncated=result.truncated
        )
    )


async def _events(request: web.Request) -> web.StreamResponse:
    """The session's events after ``Last-Event-ID``/``?after=`` (stored, then live), as SSE."""
    session = _session(request)
    raw = request.headers.get("Last-Event-ID") or request.query.get("after")
    try:
        after = parse_event_id(raw)
    except ValueError:
        return error(422, "invalid", f"after: {raw!r} is not an event id (<turn>:<seq>)", "after")
    if request.query.get("format") == "json":  # the stored log, as a list
        logged = [event.model_dump(mode="json") for event in session.events()]
        return web.json_response({"events": logged})
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


# --- the app ------------------------------------------------------------------------------------

ROUTES: list[tuple[str, str, Handler]] = [
    ("GET", "/healthz", _health),
    ("GET", "/openapi.json", _openapi),
    ("GET", "/v1/engines", _engines),
    ("GET", "/v1/engines/{name}", _engine),
    ("GET", "/v1/engines/{name}/versions", _versions),
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
    # HarnessBox aliases over the same handlers
    ("POST", "/v1/workspaces", _create_workspace),
    ("GET", "/v1/workspaces", _list_sessions),
    ("DELETE", "/v1/workspaces/{session_id}", _delete_session),
    ("POST", "/v1/workspaces/{session_id}/prompt", _start_turn),
    ("GET", "/v1/workspaces/{session_id}/events", _events),
]
"""(method, path, handler): the routes, also read by the OpenAPI document."""


def make_app(state: ServerState, keys: KeyStore) -> web.Application:
    """The server app over ``state``, with API keys checked in ``keys``, and the web dashboard at
    ``/``. No CORS headers are sent: browsers on other origins cannot call it."""
    app = web.Application(middlewares=[_trace, guard_errors, _auth], client_max_size=16 * 1024 * 1024)
    app[STATE] = state
    app[KEYS] = keys
    for method, path, handler in ROUTES:
        app.router.add_route(method, path, handler)
    add_dashboard(app)
    return app
