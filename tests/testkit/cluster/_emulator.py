"""``ClusterEmulator``: an in-memory Kubernetes API server on 127.0.0.1 for the real ``kubernetes`` client.

It runs :class:`~testkit.cluster._apiserver.ApiServer` (kmock) on its own event loop in a
background thread, serves the Agent Sandbox CRDs (every served version), ServiceAccounts,
NetworkPolicies and FQDNNetworkPolicies, and hands out ``kubernetes.client.ApiClient`` objects
pointed at it::

    with ClusterEmulator() as cluster:
        api = kubernetes.client.CustomObjectsApi(cluster.api_client())
        api.create_namespaced_custom_object("extensions.agents.x-k8s.io", "v1beta1", "default",
                                            "sandboxwarmpools", pool)

There is no controller in it: pair it with :class:`SandboxController` for Sandboxes that run.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Mapping, Sequence
from concurrent.futures import Future
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, Self

from harness_run.errors import InfrastructureError

if TYPE_CHECKING:
    import kubernetes.client

    from testkit.cluster._apiserver import ApiServer

__all__ = ["ClusterEmulator"]


class ClusterEmulator:
    """A Kubernetes API emulator (kmock, real HTTP on 127.0.0.1) with the Agent Sandbox CRDs.

    - ``crds_dir``: the folder with the CRD YAML files (default ``$HARNESS_RUN_CRDS_DIR`` or
      ``../shared/crds/agent-sandbox`` next to the repository); ``extra_crds``: more CRD documents.
    - ``field_validation``: what unknown fields get when a request does not say
      (``fieldValidation=``): ``"Strict"`` (default here: 400 naming the field, so a typo in a
      manifest fails the test), ``"Warn"`` (the real server's default: pruned, a ``Warning`` header,
      recorded in :attr:`warnings`) or ``"Ignore"``.
    """

    def __init__(
        self,
        *,
        crds_dir: str | Path | None = None,
        extra_crds: Sequence[Mapping[str, Any]] = (),
        field_validation: str = "Strict",
        port: int | None = None,
    ) -> None:
        from testkit.cluster._schema import default_crds_dir, load_resources

        self._resources = load_resources(Path(crds_dir) if crds_dir else default_crds_dir(), extra_crds)
        self._field_validation = field_validation
        self._port = port
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._stop: asyncio.Event | None = None
        self._server: ApiServer | None = None
        self._url = ""
        self._clients: list[kubernetes.client.ApiClient] = []

    # ------------------------------------------------------------------------------------------

    @property
    def url(self) -> str:
        """``http://127.0.0.1:<port>`` (only while running)."""
        if not self._url:
            raise InfrastructureError("the cluster emulator is not running: call start() or use it in `with`")
        return self._url

    @property
    def server(self) -> ApiServer:
        """The kmock handler: ``.objects`` (every object's history), ``.requests``, ``.warnings``."""
        if self._server is None:
            raise InfrastructureError("the cluster emulator is not running: call start() or use it in `with`")
        return self._server

    @property
    def warnings(self) -> list[str]:
        """Unknown fields pruned so far (``field_validation="Warn"``), as field paths."""
        return list(self.server.warnings)

    def start(self) -> Self:
        if self._thread is not None:
            return self
        ready: Future[str] = Future()
        self._thread = threading.Thread(target=self._run, args=(ready,), name="cluster-emulator", daemon=True)
        self._thread.start()
        try:
            self._url = ready.result(timeout=30)
        except Exception as exc:
            self._thread = None
            raise InfrastructureError(f"the cluster emulator did not start: {exc}") from exc
        return self

    def _run(self, ready: Future[str]) -> None:
        loop = asyncio.new_event_loop()
        self._loop = loop
        try:
            loop.run_until_complete(self._serve(ready))
        except BaseException as exc:  # report start-up failures to start()
            if not ready.done():
                ready.set_exception(exc)
        finally:
            with contextlib.suppress(Exception):
                loop.run_until_complete(loop.shutdown_asyncgens())
            loop.close()

    async def _serve(self, ready: Future[str]) -> None:
        import kmock

        from testkit.cluster._apiserver import ApiServer

        self._stop = asyncio.Event()
        handler = ApiServer(field_validation=self._field_validation)
        for rdef in self._resources:
            handler.register(rdef)
        server = kmock.Server(handler, host="127.0.0.1", port=self._port)  # pyright: ignore[reportCallIssue]
        async with handler, server:
            self._server = handler
            ready.set_result(f"http://127.0.0.1:{server.port}")
            await self._stop.wait()
            await handler.shutdown()
            await asyncio.sleep(0.05)  # let open watch streams see the end

    def stop(self) -> None:
        """Stop serving (open watches end); idempotent."""
        for client in self._clients:
            with contextlib.suppress(Exception):
                client.close()
        self._clients.clear()
        loop, stop, thread = self._loop, self._stop, self._thread
        if loop is not None and stop is not None and not loop.is_closed():
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(stop.set)
        if thread is not None:
            thread.join(timeout=30)
        self._thread = None
        self._url = ""

    def api_client(self) -> kubernetes.client.ApiClient:
        """A ``kubernetes.client.ApiClient`` for this server (closed by :meth:`stop`)."""
        import kubernetes.client

        config = kubernetes.client.Configuration(host=self.url)
        config.verify_ssl = False
        client = kubernetes.client.ApiClient(config)
        self._clients.append(client)
        return client

    def kubeconfig(self, path: str | Path) -> Path:
        """Write a kubeconfig for this server (``kubectl --kubeconfig``, ``config.load_kube_config``)."""
        import yaml

        doc = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "emulator", "cluster": {"server": self.url}}],
            "users": [{"name": "emulator", "user": {"token": "emulator"}}],
            "contexts": [
                {
                    "name": "emulator",
                    "context": {"cluster": "emulator", "user": "emulator", "namespace": "default"},
                }
            ],
            "current-context": "emulator",
        }
        target = Path(path)
        target.write_text(yaml.safe_dump(doc))
        return target

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()
