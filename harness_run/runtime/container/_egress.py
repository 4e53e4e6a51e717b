"""Egress of containers whose spec's ``network`` is ``none`` or an allow-list.

Such a container runs with ``network_mode="none"``: it has only its own loopback. What it needs
from outside goes through files in one bind-mounted directory per container (``/run/harness-run``):

- ``worker.sock`` — the worker serves its HTTP API there (the client connects to the file);
- ``egress.sock`` — an :class:`~harness_run.security.EgressProxy` on the host, in this process:
  the spec's allowed hosts for anyone, any destination for the worker's token (its model proxy's
  upstream and git). Inside, the worker relays a loopback port to it and gives the agent that port as
  ``HTTP(S)_PROXY``.

The proxies run on one event loop in a daemon thread (containers outlive the event loops of the
turns that start them).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import secrets
import shutil
import tempfile
import threading
from collections.abc import Coroutine, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from harness_run.security import EgressProxy
from harness_run.vocab.k8s import AGENT_UID

__all__ = ["SOCKET_MOUNT", "ContainerLink", "HostEgress"]

SOCKET_MOUNT = "/run/harness-run"
_T = TypeVar("_T")


@dataclass(frozen=True, slots=True)
class ContainerLink:
    """One container's directory of sockets (host side) and what its worker is told."""

    directory: Path
    proxy: EgressProxy
    env: dict[str, str]

    @property
    def worker_socket(self) -> str:
        return str(self.directory / "worker.sock")


class HostEgress:
    """The egress proxies of one pool's containers (see the module docstring)."""

    def __init__(self, allow_hosts: Sequence[str]) -> None:
        self.allow_hosts = tuple(allow_hosts)
        self.links: dict[str, ContainerLink] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._lock = threading.Lock()

    def _run(self, coro: Coroutine[Any, Any, _T]) -> _T:
        with self._lock:
            if self._loop is None:
                loop = asyncio.new_event_loop()
                threading.Thread(target=loop.run_forever, name="harness-run-egress", daemon=True).start()
                self._loop = loop
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout=30)

    def open(self, name: str) -> ContainerLink:
        """A socket directory with a listening egress proxy for the container ``name`` (blocking)."""
        # short: a unix socket path has room for ~107 bytes
        directory = Path(tempfile.mkdtemp(prefix="hr-egress-"))
        if os.getuid() == 0:
            os.chown(directory, AGENT_UID, AGENT_UID)  # the worker creates worker.sock in it
        elif os.getuid() != AGENT_UID:
            directory.chmod(0o777)
        token = secrets.token_urlsafe(24)
        proxy = EgressProxy(self.allow_hosts, worker_token=token, unix_path=str(directory / "egress.sock"))
        self._run(proxy.start())
        env = {
            "HARNESS_RUN_WORKER_SOCKET": f"{SOCKET_MOUNT}/worker.sock",
            "HARNESS_RUN_EGRESS_SOCKET": f"{SOCKET_MOUNT}/egress.sock",
            "HARNESS_RUN_EGRESS_TOKEN": token,
        }
        link = ContainerLink(directory, proxy, env)
        self.links[name] = link
        return link

    def close(self, name: str) -> None:
        """Stop the container's proxy and remove its socket directory (blocking)."""
        link = self.links.pop(name, None)
        if link is None:
            return
        with contextlib.suppress(Exception):
            self._run(link.proxy.aclose())
        shutil.rmtree(link.directory, ignore_errors=True)
