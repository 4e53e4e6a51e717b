"""``ContainerPool``: a Docker container of the compiled image per session, on this machine.

The :class:`~harness_run.runtime.worker_client._provider.SandboxProvider` of local container isolation. Each
claim starts a container of the engine's image (the ``docker`` SDK, imported lazily) whose worker
listens on its own free port of 127.0.0.1 (host network) behind a fresh bearer token, with the
host's SQLite history store bind-mounted in; it is removed after ``idle_ttl`` seconds without a
turn (the next turn starts another one, which resumes from the store), on ``close()`` and at
interpreter exit. With a spec whose ``network`` is ``none`` or an allow-list the container has no
network at all (``network_mode="none"``): the worker answers on a bind-mounted unix socket and
everything leaving it goes through the host's egress proxy (see ``_egress.py``). The workspaces
are not the container's: the worker's workdir is the host workdir (bind-mounted with the store), so
a session's workspace outlives its container, and branch pooling, shared workspaces and their locks
work across containers as on the host; a session's ``workspace.host_dir`` is bind-mounted at its own
path.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import os
import secrets
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from harness_run.errors import InfrastructureError
from harness_run.runtime.container._egress import SOCKET_MOUNT, ContainerLink, HostEgress
from harness_run.runtime.worker_client import Claim, HeldClaims
from harness_run.spec import Network
from harness_run.vocab.k8s import (
    AGENT_NETNS_ENV,
    AGENT_RUN_UID,
    AGENT_UID_ENV,
    NETWORK_SETUP_CAPABILITIES,
    WORKER_CAPABILITIES,
)
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
        network: Network | None = None,
    ) -> None:
        super().__init__(idle_ttl=idle_ttl, claim_timeout=claim_timeout, holder_prefix="local")
        self.docker = docker_client
        self.image = image
        self.engine = engine
        self.store_dir = Path(store_dir).absolute()
        self.network_mode = network_mode
        self.labels = dict(labels or {})
        self.env = dict(env or {})
        self.network = network or Network()
        self.egress = HostEgress(self.network.allow_hosts) if self.network.egress != "open" else None
        """The host side of the containers' egress (``None``: open egress, ``network_mode`` as given)."""
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
        if self.egress is not None:
            self.egress.close(name)

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
        from harness_run.runtime.worker_client import WorkerClient

        token = secrets.token_urlsafe(32)
        started = time.monotonic()
        name, port, link = await asyncio.to_thread(
            self._run, session_id, hashlib.sha256(token.encode()).hexdigest()
        )
        socket_path = link.worker_socket if link is not None else None
        try:
            await asyncio.to_thread(self._wait_healthy, name, port, socket_path)
        except BaseException:
            await asyncio.to_thread(self._remove, name)
            raise
        url = f"http://127.0.0.1:{port}" if socket_path is None else "http://worker"
        return Claim(
            name=name,
            session_id=session_id,
            sandbox=name,
            url=url if socket_path is None else f"{url} (unix socket {socket_path})",
            client=WorkerClient(url, token, unix_socket=socket_path),
            claimed_at=time.time(),
            ready_s=time.monotonic() - started,
        )

    def _run(self, session_id: str, token_sha256: str) -> tuple[str, int, ContainerLink | None]:
        import docker.errors

        port = free_port()
        name = f"hr-{self.engine[:40]}-{session_id[:8]}-{uuid.uuid4().hex[:6]}"
        link = self.egress.open(name) if self.egress is not None else None
        network_mode = "none" if link is not None else self.network_mode
        host = network_mode == "host"
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
            # its own network namespace (not the host's): the worker confines the agent's uid there
            AGENT_NETNS_ENV: "shared" if host else "own",
            **(link.env if link is not None else {}),
        }
        volumes = {str(self.store_dir): {"bind": STORE_MOUNT, "mode": "rw"}}
        if link is not None:
            volumes[str(link.directory)] = {"bind": SOCKET_MOUNT, "mode": "rw"}
        for path in self.mounts_for(session_id) if self.mounts_for is not None else []:
            volumes[str(path)] = {"bind": str(path), "mode": "rw"}
        kwargs: dict[str, Any] = {
            "detach": True,
            "name": name,
            "network_mode": network_mode,
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
            "cap_add": [*WORKER_CAPABILITIES, *(() if host else NETWORK_SETUP_CAPABILITIES)],
            "security_opt": ["no-new-privileges"],
        }
        if not host and link is None:
            kwargs["ports"] = {f"{port}/tcp": ("127.0.0.1", port)}
        try:
            self.docker.containers.run(self.image, **kwargs)
        except docker.errors.DockerException as exc:
            self._remove(name)
            raise InfrastructureError(
                f"could not start a container of {self.image} for session {session_id}: {exc}",
                retryable=True,
            ) from None
        return name, port, link

    def _wait_healthy(self, name: str, port: int, socket_path: str | None = None) -> None:
        deadline = time.monotonic() + self.claim_timeout
        next_check = 0.0
        while True:
            try:
                if socket_path is not None:
                    if _unix_healthy(socket_path):
                        return
                else:
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
                    f"the worker in container {name} ({self.image}) did not answer on "
                    f"{socket_path or f'127.0.0.1:{port}'} "
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


def _unix_healthy(path: str) -> bool:
    """``GET /healthz`` through the worker's unix socket answers 2xx."""
    import http.client
    import socket

    if not os.path.exists(path):
        return False
    conn = http.client.HTTPConnection("worker", timeout=1)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(1)
    try:
        sock.connect(path)
        conn.sock = sock
        conn.request("GET", "/healthz")
        return 200 <= conn.getresponse().status < 300
    finally:
        conn.close()
