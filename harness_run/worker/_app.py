"""The worker's HTTP server (aiohttp.web): routes, auth, the SSE event stream, graceful shutdown."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import logging
import os
import signal
import time
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable
from typing import Any, cast

from aiohttp import web
from pydantic import BaseModel, ValidationError

from harness_run.errors import (
    HarnessRunError,
    SessionBusyError,
    SessionNotFoundError,
    UsageError,
    redact,
)
from harness_run.events import AgentEvent, ResultEvent
from harness_run.runtime.remote import (
    DeliverRequest,
    ErrorBody,
    ExecRequest,
    Health,
    InterruptResponse,
    SteerRequest,
    SteerResponse,
    TurnRequest,
)
from harness_run.spec import AgentSpec
from harness_run.vocab import telemetry
from harness_run.vocab.k8s import CLAIM_TICKET
from harness_run.vocab.version import __version__
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
_SECRETS = "harness_run_secrets"

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def _error(status: int, code: str, message: str, field: str | None = None) -> web.Response:
    body = ErrorBody(error=code, message=message, field=field)
    return web.json_response(body.model_dump(exclude_none=True), status=status)


def _json(model: BaseModel, status: int = 200) -> web.Response:
    return web.Response(
        text=model.model_dump_json(), status=status, content_type="application/json", charset="utf-8"
    )


@web.middleware
async def _trace(request: web.Request, handler: Handler) -> web.StreamResponse:
    """A server span per request, continuing the caller's trace (``traceparent``); the turn started
    by ``POST /v1/turns`` runs in that span's context. Nothing when telemetry is off."""
    resource = request.match_info.route.resource
    route = resource.canonical if resource is not None else "unmatched"
    return await telemetry.serve_request(
        request.method, route, request.headers, "harness_run.worker", lambda: handler(request)
    )


@web.middleware
async def _guard(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Auth for every route but /healthz; our errors -> JSON with a status, secret values redacted."""
    settings = request.app[_SETTINGS]
    header = request.headers.get("Authorization")
    if request.path != "/healthz" and not token_matches(
        header, settings.expected_token_sha256() or await _first_contact(request.app, header)
    ):
        return _error(
            401,
            "unauthorized",
            "missing or wrong bearer token: send 'Authorization: Bearer <token>' with the claim's token",
        )
    try:
        return await handler(request)
    except web.HTTPException as exc:
        if exc.content_type == "application/json" or exc.status < 400:
            raise
        return _http_error(exc)  # aiohttp's own 404/405/413 …: the ErrorBody shape too
    except HarnessRunError as exc:
        message = redact(str(exc), request.get(_SECRETS, []))
        if isinstance(exc, SessionBusyError):
            return _error(409, "session_busy", message)
        if isinstance(exc, SessionNotFoundError):
            return _error(404, "not_found", message)
        if isinstance(exc, UsageError):
            return _error(400, "bad_request", message)
        log.error("%s %s failed: %s", request.method, request.path, message)
        return _error(500, "internal", message)
    except Exception as exc:
        message = redact(f"{type(exc).__name__}: {exc}", request.get(_SECRETS, []))
        # no traceback: its last line would repeat the unredacted message
        log.error("%s %s failed unexpectedly: %s", request.method, request.path, message)
        return _error(500, "internal", f"the worker failed: {message}")


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


_HTTP_CODES = {404: "not_found", 405: "method_not_allowed", 413: "too_large"}
_HTTP_HINTS = {
    404: "no such route; see harness_run.runtime.remote for the worker's API",
    405: "this route does not take this method; see harness_run.runtime.remote for the worker's API",
    413: "the body is larger than the worker accepts (16 MiB); send less",
}


def _http_error(exc: web.HTTPException) -> web.Response:
    code = _HTTP_CODES.get(exc.status, "bad_request" if exc.status < 500 else "internal")
    hint = _HTTP_HINTS.get(exc.status, "")
    message = f"{exc.status} {exc.reason}" + (f": {hint}" if hint else "")
    return _error(exc.status, code, f"{message} ({exc.text})" if exc.status == 413 and exc.text else message)


def _json_object(value: object) -> dict[str, object]:
    """``value`` if it is a JSON object (aiohttp's ``json()`` is untyped), else ``{}``."""
    return cast("dict[str, object]", value) if isinstance(value, dict) else {}


async def _body[M: BaseModel](request: web.Request, model: type[M]) -> M:
    try:
        data: object = json.loads(await request.read())
    except (ValueError, UnicodeDecodeError):
        raise _bad_request("the body is not JSON; send a JSON object") from None
    except RecursionError:
        raise _bad_request("the body nests too deeply; send a flat JSON object") from None
    if not isinstance(data, dict):
        raise _bad_request(f"the body must be a JSON object, see harness_run.runtime.remote.{model.__name__}")
    secrets = _json_object(cast("dict[str, object]", data).get("secrets"))
    if secrets:
        request[_SECRETS] = [v for v in secrets.values() if isinstance(v, str)]
    try:
        return model.model_validate(data)
    except RecursionError:
        raise _bad_request("the body nests too deeply; send a flat JSON object") from None
    except ValidationError as exc:
        first = exc.errors()[0]
        field = ".".join(str(p) for p in first["loc"]) or None
        text = ErrorBody(
            error="bad_request",
            message=f"{field or 'body'}: {first['msg']}; see harness_run.runtime.remote.{model.__name__}",
            field=field,
        ).model_dump_json(exclude_none=True)
        raise web.HTTPBadRequest(text=text, content_type="application/json") from None


def _bad_request(message: str) -> web.HTTPBadRequest:
    text = ErrorBody(error="bad_request", message=message).model_dump_json(exclude_none=True)
    return web.HTTPBadRequest(text=text, content_type="application/json")


# --- routes -------------------------------------------------------------------------------------


async def _health(request: web.Request) -> web.Response:
    worker, settings = request.app[_WORKER], request.app[_SETTINGS]
    return _json(Health(version=__version__, digest=settings.digest, busy=worker.busy))


async def _start_turn(request: web.Request) -> web.Response:
    body = await _body(request, TurnRequest)
    return _json(await request.app[_WORKER].start_turn(body))


async def _turn_info(request: web.Request) -> web.Response:
    return _json(request.app[_WORKER].get(request.match_info["turn_id"]).info())


async def _steer(request: web.Request) -> web.Response:
    body = await _body(request, SteerRequest)
    worker = request.app[_WORKER]
    delivered = await worker.steer(request.match_info["turn_id"], body.text, body.message_id)
    return _json(SteerResponse(delivered=delivered))


async def _interrupt(request: web.Request) -> web.Response:
    interrupted = await request.app[_WORKER].interrupt(request.match_info["turn_id"])
    return _json(InterruptResponse(interrupted=interrupted))


async def _exec(request: web.Request) -> web.Response:
    body = await _body(request, ExecRequest)
    return _json(await request.app[_WORKER].exec(body))


async def _deliver(request: web.Request) -> web.Response:
    body = await _body(request, DeliverRequest)
    return _json(await request.app[_WORKER].deliver(body))


def _resume_point(request: web.Request) -> int:
    raw = request.headers.get("Last-Event-ID") or request.query.get("after") or "-1"
    try:
        return int(raw)
    except ValueError:
        raise UsageError(f"Last-Event-ID/after must be an event seq (an integer), not {raw!r}") from None


async def _events(request: web.Request) -> web.StreamResponse:
    """SSE: every event after the resume point, live; the result only once the turn is stored."""
    state = request.app[_WORKER].get(request.match_info["turn_id"])
    after = _resume_point(request)
    response = web.StreamResponse(
        headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
    )
    await response.prepare(request)
    try:
        async for event in _turn_events(state, after):
            if event is None:
                await response.write(b": keepalive\n\n")
                continue
            if isinstance(event, ResultEvent):
                await state.finished.wait()  # stored (or failed) before it is served
                if state.error is not None:
                    break
            head = "" if event.type == "delta" else f"id: {event.seq}\n"  # deltas move no resume point
            frame = f"{head}event: {event.type}\ndata: {event.model_dump_json()}\n\n"
            await response.write(frame.encode())
            if isinstance(event, ResultEvent):
                break
        if state.error is not None:
            data = json.dumps({"type": "worker-error", "message": state.error})
            await response.write(f"event: worker-error\ndata: {data}\n\n".encode())
    except ConnectionResetError:
        return response  # the client went away; it resumes with Last-Event-ID
    with contextlib.suppress(ConnectionResetError):
        await response.write_eof()
    return response


async def _turn_events(state: TurnState, after: int) -> AsyncIterator[AgentEvent | None]:
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
    app = web.Application(middlewares=[_trace, _guard], client_max_size=16 * 1024 * 1024)
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
    runner = web.AppRunner(
        make_app(worker, settings), handle_signals=False, access_log=None, shutdown_timeout=3.0
    )
    await runner.setup()
    if settings.unix_socket is not None:  # a container without network: the client uses the file
        await web.UnixSite(runner, settings.unix_socket).start()
        os.chmod(settings.unix_socket, 0o666)
        port, where = 0, settings.unix_socket
    else:
        await web.TCPSite(runner, settings.host, settings.port, reuse_address=True).start()
        port = _bound_port(runner, settings.port)
        where = f"{settings.host}:{port}"
    log.info(
        "harness-run worker %s for engine %r listening on %s (ready in %.2f s, imports %.2f s)",
        __version__,
        spec.name,
        where,
        time.monotonic() - started,
        imported,
    )
    if ready is not None:
        ready(port)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    try:
        await stop.wait()
        log.info("shutting down")
        await worker.shutdown()
        await asyncio.sleep(0.2)  # let open event streams send the result
    finally:
        await runner.cleanup()
        if egress is not None:
            await egress.aclose()
        with contextlib.suppress(Exception):
            await asyncio.to_thread(store.close)
    log.info("stopped (pid %d)", os.getpid())


def _bound_port(runner: web.AppRunner, default: int) -> int:
    for address in runner.addresses:
        if isinstance(address, tuple) and len(address) >= 2:  # pyright: ignore[reportUnknownArgumentType]
            return int(address[1])  # pyright: ignore[reportUnknownArgumentType]
    return default


def _warm_up() -> None:
    """Build the pydantic schemas of the request path before reporting ready."""
    from harness_run import events
    from harness_run.runtime import remote

    for model in (
        remote.TurnRequest,
        remote.TurnInfo,
        remote.Health,
        remote.ExecRequest,
        remote.ExecResponse,
        events.UserEvent,
        events.ResultEvent,
    ):
        model.model_rebuild(force=True)
