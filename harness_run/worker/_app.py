"""The worker's HTTP server (aiohttp.web, through the HTTP kit :mod:`harness_run.web`): routes, the
bearer-token check, the SSE event stream, graceful shutdown."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import logging
import os
import time
from collections.abc import AsyncGenerator, Callable
from typing import Any

from aiohttp import web

from harness_run.errors import HarnessRunError, UsageError
from harness_run.events import AgentEvent, ResultEvent
from harness_run.runtime.worker_client import (
    DeliverRequest,
    ExecRequest,
    Health,
    InterruptResponse,
    SteerRequest,
    SteerResponse,
    TurnRequest,
)
from harness_run.spec import AgentSpec
from harness_run.vocab.k8s import CLAIM_TICKET
from harness_run.vocab.version import __version__
from harness_run.web import (
    Handler,
    SseFrame,
    error,
    error_middleware,
    json_response,
    listening,
    new_app,
    parse_event_id,
    read_body,
    stream_events,
    trace_middleware,
)
from harness_run.worker._egress import start_egress
from harness_run.worker._settings import WorkerSettings, bearer_sha256, open_history_store, token_matches
from harness_run.worker._turns import TurnState, Worker

__all__ = ["KEEPALIVE_INTERVAL", "make_app", "serve"]

log = logging.getLogger("harness_run.worker")

KEEPALIVE_INTERVAL = 10.0
"""Seconds of silence after which the event stream sends an SSE comment (keeps proxies open)."""

_WORKER: web.AppKey[Worker] = web.AppKey("worker", Worker)
_SETTINGS: web.AppKey[WorkerSettings] = web.AppKey("settings", WorkerSettings)
_PINNED: web.AppKey[dict[str, str]] = web.AppKey("pinned", dict[str, str])


@web.middleware
async def _authenticate(request: web.Request, handler: Handler) -> web.StreamResponse:
    """The claim's bearer token on every route but /healthz."""
    settings = request.app[_SETTINGS]
    header = request.headers.get("Authorization")
    if request.path != "/healthz" and not token_matches(
        header, settings.expected_token_sha256() or await _first_contact(request.app, header)
    ):
        return error(
            401,
            "unauthorized",
            "missing or wrong bearer token: send 'Authorization: Bearer <token>' with the claim's token",
        )
    return await handler(request)


async def _first_contact(app: web.Application, header: str | None) -> str | None:
    """No token hash in the pod's annotations yet (a warm pod just claimed; the kubelet writes the
    file late): the first token whose claim ticket is in the history store is pinned and expected
    until the annotations arrive (``k8s.CLAIM_TICKET``). A token without a ticket pins nothing."""
    pinned = app[_PINNED]
    if "sha256" in pinned:
        return pinned["sha256"]
    digest = bearer_sha256(header)
    if digest is None:
        return None
    ticket = CLAIM_TICKET + digest.encode()
    try:
        found = await asyncio.to_thread(app[_WORKER].store.get_blob, hashlib.sha256(ticket).hexdigest())
    except HarnessRunError:
        return None
    if found != ticket:
        return None
    log.info("no token annotation yet: pinned the first token with a claim ticket in the store")
    return pinned.setdefault("sha256", digest)


# --- routes -------------------------------------------------------------------------------------


async def _health(request: web.Request) -> web.Response:
    worker, settings = request.app[_WORKER], request.app[_SETTINGS]
    return json_response(Health(version=__version__, digest=settings.digest, busy=worker.busy))


async def _start_turn(request: web.Request) -> web.Response:
    body = await read_body(request, TurnRequest)
    return json_response(await request.app[_WORKER].start_turn(body))


async def _turn_info(request: web.Request) -> web.Response:
    return json_response(request.app[_WORKER].get(request.match_info["turn_id"]).info())


async def _steer(request: web.Request) -> web.Response:
    body = await read_body(request, SteerRequest)
    worker = request.app[_WORKER]
    delivered = await worker.steer(request.match_info["turn_id"], body.text, body.message_id)
    return json_response(SteerResponse(delivered=delivered))


async def _interrupt(request: web.Request) -> web.Response:
    interrupted = await request.app[_WORKER].interrupt(request.match_info["turn_id"])
    return json_response(InterruptResponse(interrupted=interrupted))


async def _exec(request: web.Request) -> web.Response:
    body = await read_body(request, ExecRequest)
    return json_response(await request.app[_WORKER].exec(body))


async def _deliver(request: web.Request) -> web.Response:
    body = await read_body(request, DeliverRequest)
    return json_response(await request.app[_WORKER].deliver(body))


def _resume_point(request: web.Request, turn: int) -> int:
    """The seq after which to stream: ``Last-Event-ID``/``?after=`` is an event id of this turn
    (``<turn>:<seq>``) or, as clients before the one id scheme sent, a bare seq."""
    raw = request.headers.get("Last-Event-ID") or request.query.get("after") or "-1"
    try:
        if ":" not in raw:
            return int(raw)
        cursor = parse_event_id(raw)
    except ValueError:
        raise UsageError(f"Last-Event-ID/after must be an event id (<turn>:<seq>), not {raw!r}") from None
    if cursor[0] != turn:
        raise UsageError(f"Last-Event-ID/after {raw!r} is an event of turn {cursor[0]}; this is turn {turn}")
    return cursor[1]


async def _events(request: web.Request) -> web.StreamResponse:
    """SSE: every event after the resume point, live; the result only once the turn is stored."""
    state = request.app[_WORKER].get(request.match_info["turn_id"])
    return await stream_events(request, _frames(state, _resume_point(request, state.run.turn)))


async def _frames(state: TurnState, after: int) -> AsyncGenerator[AgentEvent | SseFrame | None]:
    """The turn's events to stream: the result once it is stored; a ``worker-error`` frame instead
    when the turn failed (the client raises it)."""
    async with contextlib.aclosing(_turn_events(state, after)) as events:
        async for event in events:
            if isinstance(event, ResultEvent):
                await state.finished.wait()  # stored (or failed) before it is served
                if state.error is not None:
                    break
            yield event
            if isinstance(event, ResultEvent):
                return
    if state.error is not None:
        yield SseFrame("worker-error", json.dumps({"type": "worker-error", "message": state.error}))


async def _turn_events(state: TurnState, after: int) -> AsyncGenerator[AgentEvent | None]:
    """The turn's events with seq > ``after`` (and live deltas, see ``Run.follow``); None after
    KEEPALIVE_INTERVAL of silence."""
    stream = state.run.follow(after)
    pending: asyncio.Future[AgentEvent] | None = None
    try:
        while True:
            if pending is None:
                pending = asyncio.ensure_future(anext(stream))
            done, _ = await asyncio.wait({pending}, timeout=KEEPALIVE_INTERVAL)
            if not done:
                yield None
                continue
            try:
                event = pending.result()
            except StopAsyncIteration:
                return
            except Exception as exc:  # the turn task failed: _drive records why
                log.debug("event stream of turn %s ended: %s", state.turn_id, type(exc).__name__)
                await state.finished.wait()
                return
            finally:
                pending = None
            yield event
    finally:
        if pending is not None:
            pending.cancel()
        if isinstance(stream, AsyncGenerator):
            with contextlib.suppress(Exception):
                await stream.aclose()


# --- app and server -----------------------------------------------------------------------------


def make_app(worker: Worker, settings: WorkerSettings) -> web.Application:
    app = new_app(
        trace_middleware("harness_run.worker"),
        error_middleware("worker", "harness_run.runtime.worker_client"),
        _authenticate,
    )
    app[_WORKER] = worker
    app[_SETTINGS] = settings
    app[_PINNED] = {}
    app.router.add_get("/healthz", _health)
    app.router.add_post("/v1/turns", _start_turn)
    app.router.add_get("/v1/turns/{turn_id}", _turn_info)
    app.router.add_get("/v1/turns/{turn_id}/events", _events)
    app.router.add_post("/v1/turns/{turn_id}/steer", _steer)
    app.router.add_post("/v1/turns/{turn_id}/interrupt", _interrupt)
    app.router.add_post("/v1/exec", _exec)
    app.router.add_post("/v1/deliver", _deliver)
    return app


def load_spec(settings: WorkerSettings) -> AgentSpec:
    try:
        data: Any = json.loads(settings.spec_path.read_text())
    except OSError as exc:
        raise UsageError(
            f"cannot read the spec at {settings.spec_path} ({exc.strerror or exc}); set HARNESS_RUN_SPEC "
            "to the compiled spec.json"
        ) from None
    except ValueError:
        raise UsageError(f"{settings.spec_path} is not JSON; point HARNESS_RUN_SPEC at spec.json") from None
    return AgentSpec.from_dict(data, source=str(settings.spec_path))


async def serve(
    settings: WorkerSettings,
    *,
    ready: Callable[[int], None] | None = None,
    started: float | None = None,
    spec: AgentSpec | None = None,
) -> None:
    """Serve until SIGTERM/SIGINT; then stop the running turn (its result is stored) and return.

    ``started``: ``time.monotonic()`` at process start, for the "ready in" log line; ``spec``: the
    spec when already loaded (else from ``settings.spec_path``)."""
    started = time.monotonic() if started is None else started
    imported = time.monotonic() - started
    spec = load_spec(settings) if spec is None else spec
    egress = await start_egress(settings, spec)
    store = await asyncio.to_thread(open_history_store, settings.store_url, spec.name)
    worker = Worker(
        spec,
        store,
        settings.workdir,
        image_root=settings.image_root,
        pool_after=settings.pool_after,
        agent_user=settings.agent_user,
    )
    _warm_up()
    app = make_app(worker, settings)
    try:  # TCP, or a unix socket in a container without network (the client uses the file)
        async with listening(
            app, host=settings.host, port=settings.port, unix_socket=settings.unix_socket
        ) as site:
            log.info(
                "harness-run worker %s for engine %r listening on %s (ready in %.2f s, imports %.2f s)",
                __version__,
                spec.name,
                site.where,
                time.monotonic() - started,
                imported,
            )
            if ready is not None:
                ready(site.port)
            await site.stop.wait()
            log.info("shutting down")
            await worker.shutdown()
            await asyncio.sleep(0.2)  # let open event streams send the result
    finally:
        if egress is not None:
            await egress.aclose()
        with contextlib.suppress(Exception):
            await asyncio.to_thread(store.close)
    log.info("stopped (pid %d)", os.getpid())


def _warm_up() -> None:
    """Build the pydantic schemas of the request path before reporting ready."""
    from harness_run import events
    from harness_run.runtime import worker_client

    for model in (
        worker_client.TurnRequest,
        worker_client.TurnInfo,
        worker_client.Health,
        worker_client.ExecRequest,
        worker_client.ExecResponse,
        events.UserEvent,
        events.ResultEvent,
    ):
        model.model_rebuild(force=True)
