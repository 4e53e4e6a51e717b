"""A stand-in for the Cloud Run Admin API v2 (``run.googleapis.com``) on 127.0.0.1, for the real
``google-cloud-run`` client's REST transport.

It serves the paths the client uses for services and their long-running operations — GetService,
CreateService, UpdateService, GetOperation, Get/SetIamPolicy — keeps services (and policies) in memory, and **checks what the client
sends**: every body must parse strictly as a ``google.cloud.run.v2.Service`` (unknown fields are
refused), name a container image, a service account and port 8080, keep ``HARNESS_RUN_STORE`` a
``gs://`` URL, and contain none of the strings in ``forbidden`` (canary secret values). A refused
request gets a 400 naming the problem (and is kept in ``refusals``). Operations finish on their first
poll, so the client really polls. ``fail_next`` answers the next request with an API error (e.g. the
403 of a disabled API); ``fail_revision`` makes the next operation end in an error.

Usage: ``with CloudRunStandIn() as api: ServicesClient(client_options={"api_endpoint": api.url}, …)``.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import re
import threading
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web
from google.cloud import run_v2
from google.protobuf import json_format

__all__ = ["CloudRunStandIn", "Recorded"]

_SERVICES = r"/v2/projects/{project}/locations/{location}/services"
_SERVICE_TYPE = "type.googleapis.com/google.cloud.run.v2.Service"
_IMAGE = re.compile(r"[a-z0-9.:/_-]+/harness-run-server:[0-9a-f]{12}")
_GSA = re.compile(r"[a-z0-9-]+@[a-z0-9-]+\.iam\.gserviceaccount\.com")


@dataclass
class Recorded:
    method: str
    path: str
    query: dict[str, str]
    body: dict[str, Any] | None


@dataclass
class _Failure:
    status: int
    reason: str
    message: str


@dataclass
class CloudRunStandIn:
    forbidden: tuple[str, ...] = ()
    requests: list[Recorded] = field(default_factory=list[Recorded])
    refusals: list[str] = field(default_factory=list[str])
    services: dict[str, dict[str, Any]] = field(default_factory=dict[str, dict[str, Any]])
    iam: dict[str, dict[str, Any]] = field(default_factory=dict[str, dict[str, Any]])
    """service name -> its IAM policy (``getIamPolicy``/``setIamPolicy``; a test may seed one)."""
    url: str = ""

    def __post_init__(self) -> None:
        self._operations: dict[str, dict[str, Any]] = {}
        self._fail_next: _Failure | None = None
        self._fail_revision: str | None = None
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._stop: asyncio.Event | None = None
        self._thread = threading.Thread(target=self._main, daemon=True)

    # --- test controls -------------------------------------------------------------------------

    def fail_next(self, status: int, reason: str, message: str) -> None:
        """Answer the next request with a Google API error (``error.details`` carries ``reason``)."""
        self._fail_next = _Failure(status, reason, message)

    def fail_revision(self, message: str) -> None:
        """End the next create/update operation with this error (a revision that does not start)."""
        self._fail_revision = message

    def writes(self) -> list[Recorded]:
        return [r for r in self.requests if r.method in ("POST", "PATCH")]

    # --- lifecycle -----------------------------------------------------------------------------

    def __enter__(self) -> CloudRunStandIn:
        self._thread.start()
        if not self._ready.wait(30):
            raise RuntimeError("the Cloud Run stand-in did not start")
        return self

    def __exit__(self, *exc: object) -> None:
        if self._stop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(30)

    def _main(self) -> None:
        self._loop.run_until_complete(self._serve())
        self._loop.close()

    async def _serve(self) -> None:
        self._stop = asyncio.Event()
        app = web.Application(middlewares=[self._record])
        app.router.add_get(_SERVICES + "/{service}", self._get_service)
        app.router.add_post(_SERVICES, self._create_service)
        app.router.add_post(_SERVICES + "/{service}", self._set_iam_policy)
        app.router.add_patch(_SERVICES + "/{service}", self._update_service)
        app.router.add_get("/v2/projects/{project}/locations/{location}/operations/{op}", self._get_operation)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        self.url = f"http://127.0.0.1:{runner.addresses[0][1]}"
        self._ready.set()
        await self._stop.wait()
        await runner.cleanup()

    # --- handlers ------------------------------------------------------------------------------

    @web.middleware
    async def _record(self, request: web.Request, handler: Any) -> web.StreamResponse:
        raw = await request.read()
        body = json.loads(raw) if raw else None
        self.requests.append(Recorded(request.method, request.path, dict(request.query), body))
        if self._fail_next is not None:
            failure, self._fail_next = self._fail_next, None
            return _error(failure.status, failure.message, failure.reason)
        for value in self.forbidden:
            if value and value in raw.decode(errors="replace"):
                return self._refuse(f"the request carries a forbidden value ({value[:6]}…)")
        return await handler(request)

    def _refuse(self, problem: str) -> web.Response:
        self.refusals.append(problem)
        return _error(400, f"stand-in refused the request: {problem}", "INVALID_ARGUMENT")

    def _check(self, body: dict[str, Any] | None) -> str | None:
        """What is wrong with a Service body the client sent, or None."""
        if body is None:
            return "no body"
        try:
            json_format.ParseDict(body, run_v2.Service.pb(run_v2.Service()), ignore_unknown_fields=False)
        except json_format.ParseError as exc:
            return f"not a google.cloud.run.v2.Service: {exc}"
        template = body.get("template", {})
        containers = template.get("containers", [])
        if len(containers) != 1:
            return "expected exactly one container"
        container = containers[0]
        if not _IMAGE.fullmatch(container.get("image", "")):
            return f"image {container.get('image')!r} is not a harness-run-server image"
        if not _GSA.fullmatch(template.get("serviceAccount", "")):
            return f"service account {template.get('serviceAccount')!r} is not an email"
        if [p.get("containerPort") for p in container.get("ports", [])] != [8080]:
            return f"ports {container.get('ports')!r}: expected containerPort 8080"
        env = {e["name"]: e.get("value", "") for e in container.get("env", [])}
        if not env.get("HARNESS_RUN_STORE", "").startswith("gs://"):
            return f"HARNESS_RUN_STORE {env.get('HARNESS_RUN_STORE')!r} is not a gs:// URL"
        return None

    async def _get_service(self, request: web.Request) -> web.Response:
        service_id, _, verb = request.match_info["service"].partition(":")
        if verb == "getIamPolicy":
            return web.json_response(self.iam.get(_name(request, service_id), {}))
        name = _name(request, request.match_info["service"])
        service = self.services.get(name)
        if service is None:
            return _error(
                404, f"Resource '{request.match_info['service']}' of kind 'SERVICE' does not exist."
            )
        return web.json_response(service)

    async def _create_service(self, request: web.Request) -> web.Response:
        body: dict[str, Any] | None = self.requests[-1].body
        service_id = request.query.get("serviceId", "")
        if not service_id:
            return self._refuse("CreateService without serviceId")
        problem = self._check(body)
        if problem is not None:
            return self._refuse(problem)
        assert body is not None
        name = _name(request, service_id)
        if name in self.services:
            return _error(409, f"Resource '{service_id}' already exists.")
        return self._start(request, name, body, generation=1)

    async def _set_iam_policy(self, request: web.Request) -> web.Response:
        service_id, _, verb = request.match_info["service"].partition(":")
        body = self.requests[-1].body or {}
        if verb != "setIamPolicy" or "policy" not in body:
            return self._refuse(f"POST {request.path}: expected :setIamPolicy with a policy")
        self.iam[_name(request, service_id)] = body["policy"]
        return web.json_response(body["policy"])

    async def _update_service(self, request: web.Request) -> web.Response:
        body = self.requests[-1].body
        name = _name(request, request.match_info["service"])
        problem = self._check(body)
        if problem is not None:
            return self._refuse(problem)
        assert body is not None
        if body.get("name", name) != name:  # the client moves service.name into the path
            return self._refuse(f"UpdateService body names {body.get('name')!r}, not {name!r}")
        current = self.services.get(name)
        if current is None:
            return _error(
                404, f"Resource '{request.match_info['service']}' of kind 'SERVICE' does not exist."
            )
        return self._start(request, name, body, generation=int(current["generation"]) + 1)

    def _start(self, request: web.Request, name: str, body: dict[str, Any], generation: int) -> web.Response:
        service_id = name.rsplit("/", 1)[-1]
        now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        digest = hashlib.sha256(name.encode()).hexdigest()[:10]
        service = {
            **body,
            "name": name,
            "uid": str(uuid.uuid5(uuid.NAMESPACE_URL, name)),
            "generation": str(generation),
            "createTime": self.services.get(name, {}).get("createTime", now),
            "updateTime": now,
            "uri": f"https://{service_id}-{digest}-uc.a.run.app",
            "latestReadyRevision": f"{name}/revisions/{service_id}-{generation:05d}",
            "reconciling": False,
            "etag": f'"{generation}"',
        }
        op_name = f"projects/{request.match_info['project']}/locations/{request.match_info['location']}/operations/{uuid.uuid4()}"
        failure, self._fail_revision = self._fail_revision, None
        self._operations[op_name] = {"service": service, "failure": failure}
        return web.json_response(
            {
                "name": op_name,
                "done": False,
                "metadata": {"@type": _SERVICE_TYPE, **service, "reconciling": True},
            }
        )

    async def _get_operation(self, request: web.Request) -> web.Response:
        name = request.path.removeprefix("/v2/")
        op = self._operations.get(name)
        if op is None:
            return _error(404, f"operation {name} not found")
        service = op["service"]
        if op["failure"] is not None:
            return web.json_response(
                {"name": name, "done": True, "error": {"code": 9, "message": op["failure"]}}
            )
        self.services[service["name"]] = service
        return web.json_response(
            {
                "name": name,
                "done": True,
                "metadata": {"@type": _SERVICE_TYPE, **service},
                "response": {"@type": _SERVICE_TYPE, **service},
            }
        )


def _name(request: web.Request, service: str) -> str:
    return f"projects/{request.match_info['project']}/locations/{request.match_info['location']}/services/{service}"


_STATUS = {400: "INVALID_ARGUMENT", 403: "PERMISSION_DENIED", 404: "NOT_FOUND", 409: "ALREADY_EXISTS"}


def _error(status: int, message: str, reason: str = "") -> web.Response:
    error: dict[str, Any] = {"code": status, "message": message, "status": _STATUS.get(status, "UNKNOWN")}
    if reason:
        error["details"] = [
            {
                "@type": "type.googleapis.com/google.rpc.ErrorInfo",
                "reason": reason,
                "domain": "googleapis.com",
            }
        ]
    return web.json_response({"error": error}, status=status)
