"""``ContainerPool``: a Docker container of the compiled image per session, on this machine.

The :class:`~harness_run.runtime.remote._provider.SandboxProvider` of local container isolation. Each
claim starts a container of the engine's image (the ``docker`` SDK, imported lazily) whose worker
listens on its own free port of 127.0.0.1 (host network) behind a fresh bearer token, with the
host's SQLite history store bind-mounted in; it is removed after ``idle_ttl`` seconds without a
turn (the next turn starts another one, which resumes from the store), on ``close()`` and at
interpreter exit. The workspaces are not the container's: the worker's workdir is the host
workdir (bind-mounted with the store), so a session's workspace outlives its container, and branch
pooling, shared workspaces and their locks work across containers as on the host; a session's
``workspace.host_dir`` is bind-mounted at its own path.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import secrets
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from harness_run.errors import InfrastructureError
from harness_run.runtime.remote import Claim, HeldClaims
from harness_run.vocab.k8s import AGENT_RUN_UID, AGENT_UID_ENV, WORKER_CAPABILITIES
from harness_run.vocab.net import free_port

__all__ = ["LABEL_ENGINE", "LABEL_HOLDER", "LABEL_SESSION", "STORE_MOUNT", "ContainerPool"]

LABEL_ENGINE = "harness-run.dev/engine"
LABEL_SESSION = "harness-run.dev/session"
LABEL_HOLDER = "harness-run.dev/claimed-by"
STORE_MOUNT = "/var/lib/harness-run/store"
_PROBE_INTERVAL = 0.02
# Health probes go straight to 127.0.0.1, never through an HTTP(S)_PROXY from the environment.
_DIRECT = urllib.request.build_opener(urllib.request.ProxyHandler({}))


class ContainerPool(HeldClaims):
    """The containers this process runs, one per session, for one engine version."""

    def __init__(
        self,
        docker_client: Any,
        *,
        image: str,
        engine: str,
        store_dir: Path,
        idle_ttl: float = 60.0,
        claim_timeout: float = 120.0,
        network_mode: str = "host",
        labels: Mapping[str, str] | None = None,
        env: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(idle_ttl=idle_ttl, claim_timeout=claim_timeout, holder_prefix="local")
        self.docker = docker_client
        self.image = image
        self.engine = engine
        self.store_dir = Path(store_dir).absolute()
        self.network_mode = network_mode
        self.labels = dict(labels or {})
        self.env = dict(env or {})
        self.mounts_for: Callable[[str], list[Path]] | None = None
        """Host directories a session's container needs (its ``workspace.host_dir``): each is
        bind-mounted at the same path, read-write."""

    async def has_sandbox(self, session_id: str) -> bool:
        return bool(await asyncio.to_thread(self._session_containers, session_id, True))

    def worker_gone_now(self, session_id: str) -> bool:
        """No running container of the session on this Docker engine (its worker was killed)."""
        try:
            return not self._session_containers(session_id, True)
        except InfrastructureError:
            return False

    async def drop_session(self, session_id: str) -> None:
        for name in await asyncio.to_thread(self._session_containers, session_id, False):
            await asyncio.to_thread(self._remove, name)

    async def sandbox_gone(self, claim: Claim) -> str | None:
        return await asyncio.to_thread(self._gone, claim.name)

    # --- docker (blocking; called in threads) -----------------------------------------------------

    def _discard(self, claim: Claim) -> None:
        self._remove(claim.name)

    def _drop_left_now(self, session_id: str) -> None:
        for name in self._session_containers(session_id, False):
            self._remove(name)

    def _remove(self, name: str) -> None:
        with contextlib.suppress(Exception):
            self.docker.containers.get(name).remove(force=True)

    def _session_containers(self, session_id: str, running_only: bool) -> list[str]:
        """Names of the containers (of any process on this Docker engine) of this session."""
        try:
            found = self.docker.containers.list(
                all=not running_only,
                sparse=True,
                filters={"label": [f"{LABEL_ENGINE}={self.engine}", f"{LABEL_SESSION}={session_id}"]},
            )
        except Exception as exc:
            raise InfrastructureError(
                f"cannot list the session's containers: {exc}", retryable=True
            ) from None
        return [str(c.attrs.get("Names", [c.id])[0]).lstrip("/") for c in found]

    def _gone(self, name: str) -> str | None:
        import docker.errors

        try:
            container = self.docker.containers.get(name)
        except docker.errors.NotFound:
            return "was deleted"
        except Exception:
            return None  # the engine hiccuped; the event stream decides
        if container.status not in ("created", "running"):
            state: dict[str, Any] = container.attrs.get("State") or {}
            code = state.get("ExitCode")
            return f"stopped ({container.status}, exit code {code})"
        return None

    async def _new(self, session_id: str) -> Claim:
        from harness_run.runtime.remote import WorkerClient

        token = secrets.token_urlsafe(32)
        started = time.monotonic()
        name, port = await asyncio.to_thread(
            self._run, session_id, hashlib.sha256(token.encode()).hexdigest()
        )
        try:
            await asyncio.to_thread(self._wait_healthy, name, port)
        except BaseException:
            await asyncio.to_thread(self._remove, name)
            raise
        url = f"http://127.0.0.1:{port}"
        return Claim(
            name=name,
            session_id=session_id,
            sandbox=name,
            url=url,
            client=WorkerClient(url, token),
            claimed_at=time.time(),
            ready_s=time.monotonic() - started,
        )

    def _run(self, session_id: str, token_sha256: str) -> tuple[str, int]:
        import docker.errors

        port = free_port()
        host = self.network_mode == "host"
        env = {
            **self.env,
            "HARNESS_RUN_WORKER_HOST": "127.0.0.1" if host else "0.0.0.0",
            "HARNESS_RUN_WORKER_PORT": str(port),
            "HARNESS_RUN_WORKER_TOKEN_SHA256": token_sha256,
            "HARNESS_RUN_STORE": STORE_MOUNT,
            # the workspaces live in the host's workdir too (it is the store's directory): they
            # outlive the container, are pooled, shared, locked and pruned as on the host
            "HARNESS_RUN_WORKDIR": STORE_MOUNT,
            AGENT_UID_ENV: str(AGENT_RUN_UID),  # the agent's processes: another uid than the worker
        }
        volumes = {str(self.store_dir): {"bind": STORE_MOUNT, "mode": "rw"}}
        for path in self.mounts_for(session_id) if self.mounts_for is not None else []:
            volumes[str(path)] = {"bind": str(path), "mode": "rw"}
        name = f"hr-{self.engine[:40]}-{session_id[:8]}-{uuid.uuid4().hex[:6]}"
        kwargs: dict[str, Any] = {
            "detach": True,
            "name": name,
            "network_mode": self.network_mode,
            "environment": env,
            "volumes": volumes,
            "labels": {
                **self.labels,
                LABEL_ENGINE: self.engine,
                LABEL_SESSION: session_id,
                LABEL_HOLDER: self.holder,
            },
            # root with only these capabilities: the worker becomes the image's user keeping them
            # and runs the agent as AGENT_RUN_UID, without any (harness_run.worker._privileges)
            "user": "0:0",
            "cap_drop": ["ALL"],
            "cap_add": list(WORKER_CAPABILITIES),
            "security_opt": ["no-new-privileges"],
        }
        if not host:
            kwargs["ports"] = {f"{port}/tcp": ("127.0.0.1", port)}
        try:
            self.docker.containers.run(self.image, **kwargs)
        except docker.errors.DockerException as exc:
            self._remove(name)
            raise InfrastructureError(
                f"could not start a container of {self.image} for session {session_id}: {exc}",
                retryable=True,
            ) from None
        return name, port

    def _wait_healthy(self, name: str, port: int) -> None:
        deadline = time.monotonic() + self.claim_timeout
        next_check = 0.0
        while True:
            try:
                with _DIRECT.open(f"http://127.0.0.1:{port}/healthz", timeout=1) as resp:
                    if 200 <= int(resp.status) < 300:
                        return
            except (urllib.error.URLError, OSError, ValueError):
                pass
            now = time.monotonic()
            if now >= next_check:
                gone = self._gone(name)
                if gone is not None:
                    raise InfrastructureError(
                        f"the container {name} of {self.image} {gone} before its worker answered: "
                        f"{self._logs(name)}"
                    )
                next_check = now + 0.25
            if now > deadline:
                raise InfrastructureError(
                    f"the worker in container {name} ({self.image}) did not answer on 127.0.0.1:{port} "
                    f"within {self.claim_timeout:g} s: {self._logs(name)}",
                    retryable=True,
                )
            time.sleep(_PROBE_INTERVAL)

    def _logs(self, name: str) -> str:
        try:
            text = self.docker.containers.get(name).logs(tail=20).decode(errors="replace").strip()
        except Exception:
            return "(no logs)"
        return text[-1500:] or "(no output)"
