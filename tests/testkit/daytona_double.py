"""A Daytona API double: Daytona's REST API as the ``daytona`` SDK (and its generated
``daytona_api_client``) calls it, on 127.0.0.1, behind it real Docker containers.

The SDK is pointed at it only through its own settings (``DaytonaConfig(api_url=..., api_key=...)``
or ``DAYTONA_API_URL``). What it serves:

- snapshots (``GET/POST /snapshots``): from an image name (``imageName``: pulled, or already on the
  engine); a build from an uploaded context is refused (it would need Daytona's object storage);
- sandboxes (``POST /sandbox``, ``GET /sandbox`` by labels, ``GET/DELETE /sandbox/{id}``,
  ``POST /sandbox/{id}/start|stop``): one container of the snapshot's image each (the snapshot's
  entrypoint as its command, the host network — this engine has no bridge — its env and labels,
  ``user: root`` as uid 0 with only the worker's capabilities); stop/start are ``docker stop``/
  ``docker start`` (the filesystem is kept); operations answer once done (the SDK then never waits);
- volumes given by name: a host directory each (``volume_dirs``), bind-mounted at ``mountPath``;
- preview links (``GET /sandbox/{id}/ports/{port}/preview-url``): a URL of this server that
  reverse-proxies (streaming) to the sandbox's port, only with the link's ``X-Daytona-Preview-Token``.

Every API call must carry ``Authorization: Bearer <api_key>``; ``requests`` records each call.
The Socket.IO event gateway is not served (the SDK falls back to polling, which it never needs here).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import secrets
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aiohttp import ClientSession, ClientTimeout, web

from harness_run.vocab.k8s import WORKER_CAPABILITIES

__all__ = ["DaytonaDouble"]

_HOP = {"connection", "keep-alive", "transfer-encoding", "content-length", "host", "upgrade"}
_NOW = "2026-01-01T00:00:00.000Z"


@dataclass
class _Box:
    id: str
    name: str
    snapshot: str
    container: str
    env: dict[str, str]
    labels: dict[str, str]
    user: str
    state: str = "started"
    tokens: dict[int, str] = field(default_factory=dict[int, str])


class DaytonaDouble:
    """``with DaytonaDouble(docker_client, api_key=...) as api: api.url`` (the SDK's ``api_url``)."""

    def __init__(
        self,
        docker_client: Any,
        *,
        api_key: str,
        volume_dirs: dict[str, Path] | None = None,
        labels: dict[str, str] | None = None,
    ) -> None:
        self.docker = docker_client
        self.api_key = api_key
        self.volume_dirs = dict(volume_dirs or {})
        self.labels = dict(labels or {})
        self.snapshots: dict[str, dict[str, Any]] = {}
        self.boxes: dict[str, _Box] = {}
        self.requests: list[tuple[str, str]] = []
        self.url = ""
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._runner: web.AppRunner | None = None
        self._http: ClientSession | None = None

    # --- lifecycle ------------------------------------------------------------------------------

    def __enter__(self) -> DaytonaDouble:
        ready = threading.Event()
        self._loop = asyncio.new_event_loop()

        def serve() -> None:
            assert self._loop is not None
            asyncio.set_event_loop(self._loop)
            self._loop.run_until_complete(self._start())
            ready.set()
            self._loop.run_forever()

        self._thread = threading.Thread(target=serve, daemon=True, name="daytona-double")
        self._thread.start()
        ready.wait(30)
        return self

    def __exit__(self, *exc: object) -> None:
        assert self._loop is not None and self._thread is not None
        asyncio.run_coroutine_threadsafe(self._stop(), self._loop).result(30)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        for box in list(self.boxes.values()):
            with contextlib.suppress(Exception):
                self.docker.containers.get(box.container).remove(force=True)

    async def _start(self) -> None:
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_route("*", "/api/{tail:.*}", self._api)
        app.router.add_route("*", "/preview/{sid}/{port:[0-9]+}{tail:.*}", self._preview)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # pyright: ignore
        self.url = f"http://127.0.0.1:{port}/api"
        self._http = ClientSession(timeout=ClientTimeout(total=None, sock_connect=5), trust_env=False)

    async def _stop(self) -> None:
        if self._http is not None:
            await self._http.close()
        if self._runner is not None:
            await self._runner.cleanup()

    def live(self) -> list[_Box]:
        return [b for b in self.boxes.values() if b.state != "destroyed"]

    # --- the REST API ---------------------------------------------------------------------------

    async def _api(self, request: web.Request) -> web.StreamResponse:
        path = "/" + request.match_info["tail"].strip("/")
        self.requests.append((request.method, path))
        if request.headers.get("Authorization") != f"Bearer {self.api_key}":
            return _error(401, "Invalid credentials")
        parts = path.strip("/").split("/")
        body: dict[str, Any] = await request.json() if request.can_read_body else {}
        try:
            return await asyncio.to_thread(self._route, request.method, parts, body, dict(request.query))
        except KeyError as exc:
            return _error(404, f"{exc.args[0]} not found")

    def _route(
        self, method: str, parts: list[str], body: dict[str, Any], query: dict[str, str]
    ) -> web.Response:
        match method, parts:
            case "GET", ["snapshots", ref]:
                return _json(self._snapshot(ref))
            case "POST", ["snapshots"]:
                return self._create_snapshot(body)
            case "POST", ["sandbox"]:
                return _json(self._dto(self._create(body)))
            case "GET", ["sandbox"]:
                wanted: dict[str, str] = json.loads(query.get("labels") or "{}")
                items = [
                    self._dto(b) for b in self.live() if all(b.labels.get(k) == v for k, v in wanted.items())
                ]
                return _json({"items": items, "nextCursor": None})
            case "GET", ["sandbox", sid]:
                return _json(self._dto(self._box(sid)))
            case "GET", ["sandbox", sid, "toolbox-proxy-url"]:
                return _json({"url": f"{self.url}/toolbox"})
            case "POST", ["sandbox", sid, "start"]:
                box = self._box(sid)
                self.docker.containers.get(box.container).start()
                box.state = "started"
                return _json(self._dto(box))
            case "POST", ["sandbox", sid, "stop"]:
                box = self._box(sid)
                self.docker.containers.get(box.container).stop(timeout=5)
                box.state = "stopped"
                return _json(self._dto(box))
            case "DELETE", ["sandbox", sid]:
                box = self._box(sid)
                with contextlib.suppress(Exception):
                    self.docker.containers.get(box.container).remove(force=True)
                box.state = "destroyed"
                return _json(self._dto(box))
            case "GET", ["sandbox", sid, "ports", port, "preview-url"]:
                box = self._box(sid)
                token = box.tokens.setdefault(int(port), secrets.token_urlsafe(16))
                base = self.url.removesuffix("/api")
                return _json({"sandboxId": box.id, "url": f"{base}/preview/{box.id}/{port}", "token": token})
            case _:
                return _error(404, f"{method} /{'/'.join(parts)} is not served by the Daytona double")

    def _snapshot(self, ref: str) -> dict[str, Any]:
        for snap in self.snapshots.values():
            if ref in (snap["id"], snap["name"]):
                return snap
        raise KeyError(f"snapshot {ref}")

    def _create_snapshot(self, body: dict[str, Any]) -> web.Response:
        image = body.get("imageName")
        if not image:
            return _error(400, "the Daytona double makes snapshots from an image name only (imageName)")
        try:
            self.docker.images.get(image)
        except Exception:
            self.docker.images.pull(image)
        snap: dict[str, Any] = {
            "id": str(uuid.uuid4()),
            "general": False,
            "name": body["name"],
            "imageName": image,
            "state": "active",
            "size": 1.0,
            "entrypoint": body.get("entrypoint"),
            "cpu": 1,
            "gpu": 0,
            "mem": 1,
            "disk": 3,
            "errorReason": None,
            "createdAt": _NOW,
            "updatedAt": _NOW,
            "lastUsedAt": None,
            "sourceSandboxId": None,
        }
        self.snapshots[str(snap["id"])] = snap
        return _json(snap)

    def _create(self, body: dict[str, Any]) -> _Box:
        snap = self._snapshot(body["snapshot"])
        sid = str(uuid.uuid4())
        env: dict[str, str] = dict(body.get("env") or {})
        labels: dict[str, str] = dict(body.get("labels") or {})
        mounts: list[dict[str, str]] = body.get("volumes") or []
        volumes: dict[str, dict[str, str]] = {
            str(self.volume_dirs[v["volumeId"]]): {"bind": v["mountPath"], "mode": "rw"} for v in mounts
        }
        user = body.get("user") or "daytona"
        name = f"daytona-double-{sid[:12]}"
        self.docker.containers.run(
            snap["imageName"],
            command=snap["entrypoint"] or None,
            detach=True,
            name=name,
            network_mode="host",
            environment=env,
            volumes=volumes,
            labels={**self.labels, "daytona-double.sandbox": sid},
            user="0:0" if user == "root" else None,
            cap_drop=["ALL"],
            cap_add=list(WORKER_CAPABILITIES),
            security_opt=["no-new-privileges"],
        )
        box = _Box(sid, body.get("name") or sid, snap["name"], name, env, labels, user)
        self.boxes[sid] = box
        return box

    def _box(self, ref: str) -> _Box:
        for box in self.boxes.values():
            if ref in (box.id, box.name) and box.state != "destroyed":
                return box
        raise KeyError(f"sandbox {ref}")

    def _dto(self, box: _Box) -> dict[str, Any]:
        return {
            "id": box.id,
            "organizationId": "org-double",
            "name": box.name,
            "snapshot": box.snapshot,
            "user": box.user,
            "env": box.env,
            "labels": box.labels,
            "public": False,
            "networkBlockAll": False,
            "kvm": False,
            "target": "local",
            "cpu": 1,
            "gpu": 0,
            "memory": 1,
            "disk": 3,
            "state": box.state,
            "desiredState": box.state if box.state != "destroyed" else "destroyed",
            "toolboxProxyUrl": f"{self.url}/toolbox",
            "createdAt": _NOW,
            "updatedAt": time.strftime("%Y-%m-%dT%H:%M:%S.000Z", time.gmtime()),
        }

    # --- preview links --------------------------------------------------------------------------

    async def _preview(self, request: web.Request) -> web.StreamResponse:
        sid, port = request.match_info["sid"], int(request.match_info["port"])
        box = self.boxes.get(sid)
        if box is None or box.state == "destroyed":
            return _error(404, f"sandbox {sid} not found")
        if request.headers.get("X-Daytona-Preview-Token") != box.tokens.get(port):
            return _error(401, "preview token required")
        if box.state != "started":
            return _error(502, f"sandbox {sid} is {box.state}")
        assert self._http is not None
        headers = {
            k: v
            for k, v in request.headers.items()
            if k.lower() not in _HOP and k.lower() != "x-daytona-preview-token"
        }
        target = f"http://127.0.0.1:{port}{request.match_info['tail'] or '/'}"
        try:
            async with self._http.request(
                request.method, target, params=request.query, headers=headers, data=await request.read()
            ) as upstream:
                response = web.StreamResponse(status=upstream.status)
                for k, v in upstream.headers.items():
                    if k.lower() not in _HOP:
                        response.headers[k] = v
                await response.prepare(request)
                async for chunk in upstream.content.iter_any():
                    await response.write(chunk)
                await response.write_eof()
                return response
        except OSError as exc:
            return _error(502, f"nothing answers on port {port} of sandbox {sid}: {exc}")


def _json(data: Any) -> web.Response:
    return web.json_response(data)


def _error(status: int, message: str) -> web.Response:
    return web.json_response({"statusCode": status, "message": message, "error": message}, status=status)
