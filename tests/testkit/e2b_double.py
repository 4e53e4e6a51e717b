"""``E2BDouble``: E2B's REST API and sandbox router on 127.0.0.1, each sandbox a real container.

The real ``e2b`` SDK talks to it through its own settings only (:attr:`E2BDouble.env`:
``E2B_API_URL`` for the control plane, ``E2B_SANDBOX_URL`` for the sandboxes, which the SDK then
reaches with its ``E2b-Sandbox-Id``/``E2b-Sandbox-Port`` routing headers — the same headers
``E2BSandboxes`` uses for the worker). What it serves, as the SDK calls it:

- templates: ``POST /v3/templates``, ``GET /templates/{id}/files/{hash}`` (+ the upload ``PUT``),
  ``POST /v2/templates/{id}/builds/{build}`` (the steps become a Dockerfile built by our dockerd,
  cached by content like E2B's layer cache), ``GET …/builds/{build}/status``,
  ``GET /templates/aliases/{name}``;
- sandboxes: ``POST /v2/sandboxes`` (a container of the template's image, host network, its worker
  on its own port as the Kubernetes emulator does), ``GET /sandboxes/{id}``, ``GET /v2/sandboxes``
  (metadata filter), ``POST /sandboxes/{id}/pause`` (``docker pause``: memory and filesystem kept),
  ``POST /v2/sandboxes/{id}/connect`` (resumes a paused one), ``POST /sandboxes/{id}/timeout``,
  ``DELETE /sandboxes/{id}`` (the container is removed);
- the sandbox router: envd's ``GET /health`` and ``POST /files`` (multipart, envd 0.5.x) on port
  49983; any other port is reverse-proxied, streaming, to the container's worker.

``calls`` records ``(method, path)`` of every API request; ``api_keys`` the keys it was sent.
The build host's trust: ``image_aliases`` (a registry mirror: a public base image name -> a local
image) and ``build_ca_files`` (CAs its builds trust, as E2B's build network reaches PyPI).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import io
import json
import secrets
import tarfile
import tempfile
import threading
import time
import urllib.parse
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Self

from aiohttp import ClientSession, ClientTimeout, web

from harness_run.vocab.net import free_port

__all__ = ["E2BDouble"]

ENVD_PORT = 49983
ENVD_VERSION = "0.5.6"
_HOP = {"connection", "keep-alive", "transfer-encoding", "host", "content-length"}


@dataclass
class _Template:
    template_id: str
    name: str
    build_id: str = ""
    status: str = "waiting"
    image: str = ""
    logs: list[str] = field(default_factory=list[str])
    reason: str | None = None


@dataclass
class _Sandbox:
    sandbox_id: str
    template: _Template
    container: str
    port: int
    metadata: dict[str, str]
    state: str = "running"
    started: float = field(default_factory=time.time)
    timeout: int = 300


class E2BDouble:
    """E2B's API double (see the module docstring). ``with E2BDouble(docker) as e2b: ...``."""

    def __init__(
        self,
        docker_client: Any,
        *,
        extra_env: Mapping[str, str] | None = None,
        labels: Mapping[str, str] | None = None,
        image_aliases: Mapping[str, str] | None = None,
        build_ca_files: Sequence[str | Path] = (),
    ) -> None:
        self.docker = docker_client
        self.extra_env = dict(extra_env or {})
        self.labels = dict(labels or {})
        self.image_aliases = dict(image_aliases or {})
        self.build_ca = b"".join(Path(p).read_bytes() for p in build_ca_files)
        self.templates: dict[str, _Template] = {}
        self.sandboxes: dict[str, _Sandbox] = {}
        self.calls: list[tuple[str, str]] = []
        self.api_keys: set[str] = set()
        self.uploads: dict[str, bytes] = {}
        self.port = free_port()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="e2b-double", daemon=True)
        self._runner: web.AppRunner | None = None
        self._http: ClientSession | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def env(self) -> dict[str, str]:
        """The SDK's own settings that point it here."""
        return {"E2B_API_URL": self.url, "E2B_SANDBOX_URL": self.url, "E2B_DOMAIN": "e2b.local"}

    def start(self) -> Self:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._start(), self._loop).result(30)
        return self

    def stop(self) -> None:
        for sandbox in list(self.sandboxes.values()):
            self._remove(sandbox)
        self.sandboxes.clear()
        with contextlib.suppress(Exception):
            asyncio.run_coroutine_threadsafe(self._stop(), self._loop).result(30)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def count(self, method: str, suffix: str) -> int:
        """How many API calls of ``method`` had a path ending with ``suffix``."""
        return sum(1 for m, p in self.calls if m == method and p.endswith(suffix))

    def live_containers(self) -> list[str]:
        """Names of the containers of this double's sandboxes that Docker still has."""
        names: list[str] = []
        for c in self.docker.containers.list(all=True, filters={"label": "e2b-double.sandbox"}):
            if c.labels.get("e2b-double.port") == str(self.port):
                names.append(c.name)
        return names

    # --- server -----------------------------------------------------------------------------------

    async def _start(self) -> None:
        app = web.Application(middlewares=[self._route], client_max_size=1 << 30)
        r = app.router
        r.add_post("/v3/templates", self._request_build)
        r.add_get("/templates/{tid}/files/{hash}", self._upload_link)
        r.add_put("/_uploads/{hash}", self._upload)
        r.add_post("/v2/templates/{tid}/builds/{bid}", self._trigger_build)
        r.add_get("/templates/{tid}/builds/{bid}/status", self._build_status)
        r.add_get("/templates/aliases/{alias}", self._alias)
        r.add_post("/v2/sandboxes", self._create)
        r.add_get("/v2/sandboxes", self._list)
        r.add_get("/sandboxes/{sid}", self._get)
        r.add_delete("/sandboxes/{sid}", self._kill)
        r.add_post("/sandboxes/{sid}/pause", self._pause)
        r.add_post("/v2/sandboxes/{sid}/connect", self._connect)
        r.add_post("/sandboxes/{sid}/timeout", self._timeout)
        self._http = ClientSession(timeout=ClientTimeout(total=None, sock_connect=5), auto_decompress=False)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", self.port).start()

    async def _stop(self) -> None:
        if self._http is not None:
            await self._http.close()
        if self._runner is not None:
            await self._runner.cleanup()

    @web.middleware
    async def _route(self, request: web.Request, handler: Any) -> web.StreamResponse:
        sandbox_id = request.headers.get("E2b-Sandbox-Id")
        port = request.headers.get("E2b-Sandbox-Port")
        host = request.headers.get("Host", "").split(":")[0]
        first = host.split(".")[0]
        if sandbox_id is None and first.count("-") >= 1 and first.split("-")[0].isdigit():
            port, _, sandbox_id = first.partition("-")
        if sandbox_id is not None:
            return await self._sandbox_request(request, sandbox_id, int(port or ENVD_PORT))
        self.calls.append((request.method, request.path))
        key = request.headers.get("X-API-KEY")
        if key:
            self.api_keys.add(key)
        elif not request.path.startswith("/_uploads/"):
            return _error(401, "missing X-API-KEY")
        return await handler(request)

    # --- templates --------------------------------------------------------------------------------

    async def _request_build(self, request: web.Request) -> web.Response:
        body = await request.json()
        name = str(body["name"]).split(":")[0]
        template = self.templates.get(name) or _Template(template_id=f"tpl{secrets.token_hex(6)}", name=name)
        template.build_id = secrets.token_hex(8)
        template.status, template.logs, template.reason = "waiting", [], None
        self.templates[name] = template
        answer = {
            "templateID": template.template_id,
            "buildID": template.build_id,
            "public": False,
            "names": [name],
            "tags": list(body.get("tags") or []),
            "aliases": [name],
        }
        return web.json_response(answer, status=202)

    async def _upload_link(self, request: web.Request) -> web.Response:
        digest = request.match_info["hash"]
        if digest in self.uploads:
            return web.json_response({"present": True}, status=201)
        return web.json_response({"present": False, "url": f"{self.url}/_uploads/{digest}"}, status=201)

    async def _upload(self, request: web.Request) -> web.Response:
        self.uploads[request.match_info["hash"]] = await request.read()
        return web.Response(status=200)

    def _template(self, template_id: str) -> _Template | None:
        name = template_id.split(":")[0]
        return self.templates.get(name) or next(
            (t for t in self.templates.values() if t.template_id == name), None
        )

    async def _trigger_build(self, request: web.Request) -> web.Response:
        template = self._template(request.match_info["tid"])
        if template is None or template.build_id != request.match_info["bid"]:
            return _error(404, "no such build")
        body = await request.json()
        template.status = "building"
        self._loop.run_in_executor(None, self._build, template, body)
        return web.Response(status=202)

    async def _build_status(self, request: web.Request) -> web.Response:
        template = self._template(request.match_info["tid"])
        if template is None:
            return _error(404, "no such template")
        offset = int(request.query.get("logsOffset", "0"))
        now = datetime.now(UTC).isoformat()
        entries = [{"timestamp": now, "level": "info", "message": m} for m in template.logs[offset:]]
        answer: dict[str, Any] = {
            "templateID": template.template_id,
            "buildID": template.build_id,
            "status": template.status,
            "logs": [],
            "logEntries": entries,
        }
        if template.reason is not None:
            answer["reason"] = {"message": template.reason}
        return web.json_response(answer)

    async def _alias(self, request: web.Request) -> web.Response:
        template = self._template(request.match_info["alias"])
        if template is None or template.status != "ready":
            return _error(404, "template not found")
        return web.json_response({"templateID": template.template_id, "public": False})

    def _build(self, template: _Template, body: dict[str, Any]) -> None:
        """The build's steps as a Dockerfile, built by dockerd (skipped when an image of the same
        content exists: E2B's cache)."""
        try:
            with tempfile.TemporaryDirectory(prefix="e2b-double-") as tmp:
                dockerfile = self._dockerfile(body, Path(tmp))
                digest = hashlib.sha256(dockerfile.encode())
                for step in body.get("steps") or []:
                    digest.update(str(step.get("filesHash", "")).encode())
                tag = f"e2b-double/{template.name}:{digest.hexdigest()[:16]}"
                if not self._image_exists(tag):
                    (Path(tmp) / "Dockerfile").write_text(dockerfile)
                    for chunk in self.docker.api.build(
                        path=tmp, tag=tag, rm=True, decode=True, network_mode="host"
                    ):
                        line = str(chunk.get("stream") or chunk.get("status") or "").strip()
                        if line:
                            template.logs.append(line)
                        if "error" in chunk:
                            raise RuntimeError(str(chunk["error"]))
                else:
                    template.logs.append(f"cached: {tag}")
            template.image, template.status = tag, "ready"
        except Exception as exc:
            template.reason, template.status = f"build failed: {exc}", "error"

    def _image_exists(self, tag: str) -> bool:
        try:
            self.docker.images.get(tag)
        except Exception:
            return False
        return True

    def _dockerfile(self, body: dict[str, Any], context: Path) -> str:
        base = str(body.get("fromImage") or "")
        lines = [f"FROM {self.image_aliases.get(base, base)}", "USER root"]
        if self.build_ca:
            (context / "build-ca.crt").write_bytes(self.build_ca)
            lines += [
                "COPY build-ca.crt /usr/local/share/ca-certificates/e2b-build-ca.crt",
                "RUN update-ca-certificates >/dev/null 2>&1 || "
                "cat /usr/local/share/ca-certificates/e2b-build-ca.crt >> /etc/ssl/certs/ca-certificates.crt",
            ]
        user = "root"
        for step in body.get("steps") or []:
            kind, args = str(step["type"]), [str(a) for a in step.get("args") or []]
            if kind == "RUN":
                if len(args) > 1 and args[1] and args[1] != user:
                    lines += [f"USER {args[1]}", f"RUN {args[0]}", f"USER {user}"]
                else:
                    lines.append(f"RUN {args[0]}")
            elif kind == "COPY":
                src, dest = args[0], args[1]
                folder = f"files/{step['filesHash']}"
                with tarfile.open(fileobj=io.BytesIO(self.uploads[step["filesHash"]]), mode="r:*") as tar:
                    tar.extractall(context / folder, filter="tar")
                flags = f"--chown={args[2]} " if len(args) > 2 and args[2] else ""
                flags += f"--chmod={args[3]} " if len(args) > 3 and args[3] else ""
                lines.append(f"COPY {flags}{folder}/{src} {dest}")
            elif kind == "ENV":
                pairs = [f"{args[i]}={json.dumps(args[i + 1])}" for i in range(0, len(args) - 1, 2)]
                lines.append("ENV " + " ".join(pairs))
            elif kind == "USER":
                user = args[0]
                lines.append(f"USER {user}")
            elif kind == "WORKDIR":
                lines.append(f"WORKDIR {args[0]}")
        if body.get("startCmd"):
            lines.append(f"ENTRYPOINT {json.dumps(['/bin/sh', '-c', str(body['startCmd'])])}")
        return "\n".join(lines) + "\n"

    # --- sandboxes --------------------------------------------------------------------------------

    async def _create(self, request: web.Request) -> web.Response:
        body = await request.json()
        template = self._template(str(body.get("templateID", "")))
        if template is None or template.status != "ready":
            return _error(404, f"template {body.get('templateID')!r} not found")
        sandbox = _Sandbox(
            sandbox_id=f"i{secrets.token_hex(10)}",
            template=template,
            container="",
            port=free_port(),
            metadata={str(k): str(v) for k, v in (body.get("metadata") or {}).items()},
            timeout=int(body.get("timeout") or 300),
        )
        sandbox.container = f"e2b-double-{sandbox.sandbox_id}"
        env = {str(k): str(v) for k, v in (body.get("envVars") or {}).items()}
        await asyncio.to_thread(self._run, sandbox, env)
        self.sandboxes[sandbox.sandbox_id] = sandbox
        return web.json_response(self._sandbox_json(sandbox), status=201)

    def _run(self, sandbox: _Sandbox, env: dict[str, str]) -> None:
        self.docker.containers.run(
            sandbox.template.image,
            detach=True,
            name=sandbox.container,
            network_mode="host",
            environment={
                **env,
                **self.extra_env,
                # the sandbox's network is the host's here: its worker gets its own port
                "HARNESS_RUN_WORKER_HOST": "127.0.0.1",
                "HARNESS_RUN_WORKER_PORT": str(sandbox.port),
                "HARNESS_RUN_AGENT_NETNS": "shared",
            },
            labels={
                **self.labels,
                "e2b-double.sandbox": sandbox.sandbox_id,
                "e2b-double.port": str(self.port),
            },
        )

    def _sandbox_json(self, sandbox: _Sandbox) -> dict[str, Any]:
        return {
            "templateID": sandbox.template.template_id,
            "sandboxID": sandbox.sandbox_id,
            "clientID": "e2b-double",
            "envdVersion": ENVD_VERSION,
        }

    def _detail(self, sandbox: _Sandbox) -> dict[str, Any]:
        started = datetime.fromtimestamp(sandbox.started, UTC)
        return {
            **self._sandbox_json(sandbox),
            "alias": sandbox.template.name,
            "startedAt": started.isoformat(),
            "endAt": datetime.fromtimestamp(sandbox.started + sandbox.timeout, UTC).isoformat(),
            "cpuCount": 2,
            "memoryMB": 1024,
            "diskSizeMB": 1024,
            "state": sandbox.state,
            "metadata": sandbox.metadata,
        }

    async def _list(self, request: web.Request) -> web.Response:
        wanted = dict(urllib.parse.parse_qsl(request.query.get("metadata", "")))
        states = set(filter(None, request.query.get("state", "").split(","))) or {"running", "paused"}
        found = [
            self._detail(s)
            for s in self.sandboxes.values()
            if s.state in states and all(s.metadata.get(k) == v for k, v in wanted.items())
        ]
        return web.json_response(found)

    def _find(self, request: web.Request) -> _Sandbox | None:
        return self.sandboxes.get(request.match_info["sid"])

    async def _get(self, request: web.Request) -> web.Response:
        sandbox = self._find(request)
        if sandbox is None:
            return _error(404, "sandbox not found")
        return web.json_response(self._detail(sandbox))

    async def _kill(self, request: web.Request) -> web.Response:
        sandbox = self.sandboxes.pop(request.match_info["sid"], None)
        if sandbox is None:
            return _error(404, "sandbox not found")
        await asyncio.to_thread(self._remove, sandbox)
        return web.Response(status=204)

    def _remove(self, sandbox: _Sandbox) -> None:
        with contextlib.suppress(Exception):
            self.docker.containers.get(sandbox.container).remove(force=True)

    async def _pause(self, request: web.Request) -> web.Response:
        sandbox = self._find(request)
        if sandbox is None:
            return _error(404, "sandbox not found")
        if sandbox.state == "paused":
            return _error(409, "sandbox is already paused")
        await asyncio.to_thread(lambda: self.docker.containers.get(sandbox.container).pause())
        sandbox.state = "paused"
        return web.Response(status=204)

    async def _connect(self, request: web.Request) -> web.Response:
        sandbox = self._find(request)
        if sandbox is None:
            return _error(404, "sandbox not found")
        body = await request.json()
        sandbox.timeout = max(sandbox.timeout, int(body.get("timeout") or 0))
        if sandbox.state == "paused":
            await asyncio.to_thread(lambda: self.docker.containers.get(sandbox.container).unpause())
            sandbox.state = "running"
            return web.json_response(self._sandbox_json(sandbox), status=201)
        return web.json_response(self._sandbox_json(sandbox), status=200)

    async def _timeout(self, request: web.Request) -> web.Response:
        sandbox = self._find(request)
        if sandbox is None:
            return _error(404, "sandbox not found")
        sandbox.timeout = int((await request.json()).get("timeout") or sandbox.timeout)
        return web.Response(status=204)

    # --- the sandbox router -----------------------------------------------------------------------

    async def _sandbox_request(self, request: web.Request, sandbox_id: str, port: int) -> web.StreamResponse:
        sandbox = self.sandboxes.get(sandbox_id)
        if sandbox is None or sandbox.state != "running":
            return _error(502, f"sandbox {sandbox_id} is not running")
        if port == ENVD_PORT:
            return await self._envd(request, sandbox)
        assert self._http is not None
        headers = {
            k: v for k, v in request.headers.items() if k.lower() not in _HOP and not k.startswith("E2b-")
        }
        target = f"http://127.0.0.1:{sandbox.port}{request.rel_url}"
        try:
            upstream = await self._http.request(
                request.method, target, headers=headers, data=await request.read(), allow_redirects=False
            )
        except OSError as exc:
            return _error(502, f"the sandbox's port {port} does not answer: {exc}")
        async with upstream:
            answer = web.StreamResponse(status=upstream.status)
            for k, v in upstream.headers.items():
                if k.lower() not in _HOP:
                    answer.headers[k] = v
            await answer.prepare(request)
            with contextlib.suppress(ConnectionError):  # the client went away (a re-connecting stream)
                async for chunk in upstream.content.iter_any():
                    await answer.write(chunk)
                await answer.write_eof()
            return answer

    async def _envd(self, request: web.Request, sandbox: _Sandbox) -> web.StreamResponse:
        if request.path == "/health":
            return web.Response(status=204)
        if request.path != "/files" or request.method != "POST":
            return _error(404, f"envd double: {request.method} {request.path} is not served")
        path = request.query.get("path", "")
        user = request.query.get("username", "user")
        reader = await request.multipart()
        part: Any = await reader.next()
        data = bytes(await part.read()) if part is not None else b""
        await asyncio.to_thread(self._write_file, sandbox, path, data, user)
        name = path.rsplit("/", 1)[-1]
        return web.json_response([{"name": name, "type": "file", "path": path}])

    def _write_file(self, sandbox: _Sandbox, path: str, data: bytes, user: str) -> None:
        container = self.docker.containers.get(sandbox.container)
        parent, _, name = path.rpartition("/")
        uid = 0 if user == "root" else 1000
        container.exec_run(["mkdir", "-p", "-m", "700" if uid == 0 else "755", parent or "/"], user="0")
        buffer = io.BytesIO()
        with tarfile.open(fileobj=buffer, mode="w") as tar:
            info = tarfile.TarInfo(name)
            info.size, info.mode, info.uid, info.gid = len(data), 0o600, uid, uid
            tar.addfile(info, io.BytesIO(data))
        container.put_archive(parent or "/", buffer.getvalue())

    def exec(self, sandbox_id: str, command: str) -> str:
        """Run ``command`` as root in the sandbox's container (tests look inside)."""
        container = self.docker.containers.get(self.sandboxes[sandbox_id].container)
        return container.exec_run(["sh", "-c", command], user="0").output.decode(errors="replace")


def _error(status: int, message: str) -> web.Response:
    return web.json_response({"code": status, "message": message}, status=status)
