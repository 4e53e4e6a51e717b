"""The kubelet half of the test controller: one real Docker container per Sandbox.

A pod template becomes ``docker run`` with host networking (no bridge exists here): the template
container's image, command/args, env, workingDir, user (runAsUser/runAsGroup), memory/CPU limits,
dropped capabilities and ``no-new-privileges`` (never ``NET_ADMIN``/``NET_RAW``: on the host's
network the worker is told ``HARNESS_RUN_AGENT_NETNS=shared`` and leaves the firewall alone);
emptyDir volumes are host directories; the downward-API volume is a host directory holding ``annotations`` (and ``labels``) files in the
kubelet's ``key="value"`` format, mounted at ``/etc/harness-run/podinfo`` (and wherever the template
mounts it). Every container gets its own free port in ``HARNESS_RUN_WORKER_PORT``; the template's
declared container port (and a readiness probe on it) maps to that port.

Ready = the readinessProbe (httpGet / tcpSocket / exec) succeeds, polled every 20 ms; without a
probe, the container is running.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import tempfile
import threading
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

from harness_run.vocab import k8s
from harness_run.vocab.net import free_port

__all__ = ["LABEL_CONTROLLER", "LABEL_SANDBOX", "Pod", "PodRuntime", "downward_api_text"]

Obj = dict[str, Any]
LABEL_CONTROLLER = "org.harness-run.cluster.controller"
LABEL_SANDBOX = "org.harness-run.cluster.sandbox"
_PROBE_INTERVAL = 0.02
# Probes go straight to 127.0.0.1, never through an HTTP(S)_PROXY from the environment.
_DIRECT = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def downward_api_text(values: Mapping[str, str]) -> str:
    """The kubelet's rendering of labels/annotations: sorted ``key="value"`` lines (Go-quoted)."""
    return "".join(f"{key}={json.dumps(values[key], ensure_ascii=False)}\n" for key in sorted(values))


def _quantity(value: Any) -> float | None:
    """A Kubernetes quantity ("500m", "2", "4Gi", "512M") as a number of units (cores or bytes)."""
    text = str(value).strip()
    suffixes = {
        "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50,
        "k": 10**3, "K": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "P": 10**15, "m": 1e-3,
    }  # fmt: skip
    for suffix, factor in sorted(suffixes.items(), key=lambda kv: -len(kv[0])):
        if text.endswith(suffix):
            with contextlib.suppress(ValueError):
                return float(text[: -len(suffix)]) * factor
            return None
    with contextlib.suppress(ValueError):
        return float(text)
    return None


@dataclass(eq=False)
class Pod:
    """One sandbox's container and what the kubelet knows about it."""

    namespace: str
    name: str
    uid: str
    port: int
    root: Path
    template: Obj
    annotations: dict[str, str]
    labels: dict[str, str]
    state: str = "Pending"  # Pending -> Ready | Failed | Killed
    message: str = "starting the container"
    container_id: str | None = None
    created: float = field(default_factory=time.monotonic)
    ready_at: float | None = None
    removed: bool = False

    @property
    def ready(self) -> bool:
        return self.state == "Ready"

    @property
    def podinfo(self) -> Path:
        return self.root / "podinfo"


class PodRuntime:
    """Starts, probes, annotates, kills and removes the containers of the sandboxes."""

    def __init__(
        self,
        docker_client: Any,
        *,
        extra_env: Mapping[str, str],
        labels: Mapping[str, str],
        on_change: Callable[[], None],
        startup_timeout: float = 120.0,
    ) -> None:
        self._docker = docker_client
        self._extra_env = dict(extra_env)
        self._id = uuid.uuid4().hex[:12]
        self._labels = {**labels, LABEL_CONTROLLER: self._id}
        self._on_change = on_change
        self._startup_timeout = startup_timeout
        self._root = Path(tempfile.mkdtemp(prefix="hr-cluster-"))
        self._root.chmod(0o755)
        self._pool = ThreadPoolExecutor(max_workers=8, thread_name_prefix="sandbox-pod")
        self._closed = threading.Event()
        self._ports: set[int] = set()
        self._lock = threading.Lock()
        self._last_poll = 0.0

    @property
    def controller_label(self) -> tuple[str, str]:
        return LABEL_CONTROLLER, self._id

    # ------------------------------------------------------------------------------------------

    def start(self, namespace: str, name: str, uid: str, template: Obj) -> Pod:
        """Create the pod's files and port now; run and probe the container in the background."""
        with self._lock:
            port = free_port()
            while port in self._ports:
                port = free_port()
            self._ports.add(port)
        meta = cast(Obj, template.get("metadata") or {})
        root = self._root / f"{namespace}.{name}.{uid[:8]}"
        pod = Pod(
            namespace=namespace,
            name=name,
            uid=uid,
            port=port,
            root=root,
            template=template,
            annotations=dict(meta.get("annotations") or {}),
            labels=dict(meta.get("labels") or {}),
        )
        (root / "podinfo").mkdir(parents=True)
        for path in (root, root / "podinfo"):
            path.chmod(0o755)
        self.write_podinfo(pod)
        self._pool.submit(self._run, pod)
        return pod

    def write_podinfo(self, pod: Pod, annotations: Mapping[str, str] | None = None) -> None:
        """(Re)write the downward-API files atomically, as the kubelet does on a metadata change."""
        if annotations is not None:
            pod.annotations = dict(annotations)
        for fname, values in (("annotations", pod.annotations), ("labels", pod.labels)):
            tmp = pod.podinfo / f".{fname}.tmp"
            tmp.write_text(downward_api_text(values))
            tmp.chmod(0o644)
            os.replace(tmp, pod.podinfo / fname)

    def _container(self, pod: Pod) -> Obj:
        spec = cast(Obj, pod.template.get("spec") or {})
        containers = cast(list[Obj], spec.get("containers") or [{}])
        return containers[0]

    def _declared_ports(self, pod: Pod) -> set[int | str]:
        ports: set[int | str] = {k8s.WORKER_PORT, k8s.WORKER_PORT_NAME}
        for entry in cast(list[Obj], self._container(pod).get("ports") or []):
            ports.update(p for p in (entry.get("containerPort"), entry.get("name")) if p is not None)
        return ports

    def _run_kwargs(self, pod: Pod) -> Obj:
        spec = cast(Obj, pod.template.get("spec") or {})
        container = self._container(pod)
        env: dict[str, str] = {}
        for item in cast(list[Obj], container.get("env") or []):
            if "value" in item:
                env[str(item["name"])] = str(item["value"])
        env.update(self._extra_env)
        # host network: the pod's namespace is the host's, whose firewall the worker must not change
        # (the agent's egress rules are tested on the container runtime, tests/security)
        env[k8s.AGENT_NETNS_ENV] = "shared"
        env["HARNESS_RUN_WORKER_PORT"] = str(pod.port)
        env.setdefault("HARNESS_RUN_WORKER_HOST", "127.0.0.1")
        volumes = [f"{pod.podinfo}:{k8s.PODINFO_DIR}:ro"]
        kinds = {str(v.get("name")): v for v in cast(list[Obj], spec.get("volumes") or [])}
        for mount in cast(list[Obj], container.get("volumeMounts") or []):
            volume = kinds.get(str(mount.get("name")), {})
            target = str(mount["mountPath"])
            if "downwardAPI" in volume:
                if target != k8s.PODINFO_DIR:
                    volumes.append(f"{pod.podinfo}:{target}:ro")
            else:  # emptyDir (and anything else): a fresh host directory
                host = pod.root / "volumes" / str(mount.get("name"))
                host.mkdir(parents=True, exist_ok=True)
                host.chmod(0o777)
                volumes.append(f"{host}:{target}:rw")
        security = {
            **cast(Obj, spec.get("securityContext") or {}),
            **cast(Obj, container.get("securityContext") or {}),
        }
        kwargs: Obj = {
            "image": container.get("image"),
            "detach": True,
            "network_mode": "host",
            "environment": env,
            "volumes": volumes,
            "labels": {**self._labels, LABEL_SANDBOX: f"{pod.namespace}/{pod.name}"},
            "name": f"hr-sandbox-{pod.namespace}-{pod.name}-{pod.uid[:6]}"[:120],
        }
        if container.get("command"):
            kwargs["entrypoint"] = list(container["command"])
            kwargs["command"] = list(container.get("args") or [])
        elif container.get("args"):
            kwargs["command"] = list(container["args"])
        if container.get("workingDir"):
            kwargs["working_dir"] = container["workingDir"]
        if security.get("runAsUser") is not None:
            group = security.get("runAsGroup", security["runAsUser"])
            kwargs["user"] = f"{security['runAsUser']}:{group}"
        capabilities = cast(Obj, security.get("capabilities") or {})
        drop, add = (
            cast(list[str], capabilities.get("drop") or []),
            cast(list[str], capabilities.get("add") or []),
        )
        add = [cap for cap in add if cap not in k8s.NETWORK_SETUP_CAPABILITIES]  # host network
        kwargs.update(cap_drop=["ALL"] if "ALL" in drop else None, cap_add=list(add) or None)
        if security.get("allowPrivilegeEscalation") is False:
            kwargs["security_opt"] = ["no-new-privileges"]
        limits = cast(Obj, (container.get("resources") or {}).get("limits") or {})
        memory = _quantity(limits["memory"]) if "memory" in limits else None
        cpu = _quantity(limits["cpu"]) if "cpu" in limits else None
        if memory:
            kwargs["mem_limit"] = int(memory)
        if cpu:
            kwargs["nano_cpus"] = int(min(cpu, os.cpu_count() or 1) * 1e9)
        return kwargs

    def _run(self, pod: Pod) -> None:
        try:
            kwargs = self._run_kwargs(pod)
            if self._closed.is_set() or pod.removed:
                return
            container = self._docker.containers.run(**kwargs)
            pod.container_id = container.id
            if self._closed.is_set() or pod.removed:
                self._remove_container(pod)
                return
            if pod.state == "Killed":  # killed while its container was being created
                self.kill(pod, pod.message)
                return
            self._probe(pod, container)
        except Exception as exc:
            pod.state, pod.message = "Failed", f"could not start the container: {exc}"
        self._on_change()

    def _probe(self, pod: Pod, container: Any) -> None:
        probe = cast(Obj, self._container(pod).get("readinessProbe") or {})
        deadline = time.monotonic() + self._startup_timeout
        next_check = 0.0
        while not (self._closed.is_set() or pod.removed or pod.state != "Pending"):
            now = time.monotonic()
            if now >= next_check:  # the container must still be running
                container.reload()
                if container.status not in ("created", "running"):
                    code = container.attrs.get("State", {}).get("ExitCode")
                    tail = container.logs(tail=20).decode(errors="replace").strip()
                    pod.state, pod.message = "Failed", f"container exited with code {code}: {tail[-1500:]}"
                    return
                next_check = now + 0.25
            if self._probe_once(pod, probe, container):
                pod.state, pod.message, pod.ready_at = "Ready", "", time.monotonic()
                return
            if now > deadline:
                pod.state, pod.message = "Failed", f"not ready after {self._startup_timeout:.0f}s"
                return
            time.sleep(_PROBE_INTERVAL)

    def _probe_once(self, pod: Pod, probe: Obj, container: Any) -> bool:
        def port_of(value: Any) -> int:
            return pod.port if value in self._declared_ports(pod) else int(value)

        if "httpGet" in probe:
            get = cast(Obj, probe["httpGet"])
            url = f"http://127.0.0.1:{port_of(get.get('port'))}{get.get('path') or '/'}"
            try:
                with _DIRECT.open(url, timeout=1) as resp:
                    return 200 <= int(resp.status) < 400
            except (urllib.error.URLError, OSError, ValueError):
                return False
        if "tcpSocket" in probe:
            try:
                with socket.create_connection(
                    ("127.0.0.1", port_of(probe["tcpSocket"].get("port"))), timeout=1
                ):
                    return True
            except OSError:
                return False
        if "exec" in probe:
            result = container.exec_run(list(probe["exec"].get("command") or []))
            return int(result.exit_code) == 0
        container.reload()
        return container.status == "running"

    # ------------------------------------------------------------------------------------------

    def kill(self, pod: Pod, reason: str = "killed by the test (kill_sandbox)") -> None:
        pod.state, pod.message = "Killed", reason
        if pod.container_id:
            with contextlib.suppress(Exception):
                self._docker.containers.get(pod.container_id).kill()

    def remove(self, pod: Pod) -> None:
        """Remove the container and the pod's files (in the background)."""
        pod.removed = True
        if not self._closed.is_set():
            self._pool.submit(self._remove_container, pod)

    def _remove_container(self, pod: Pod) -> None:
        if pod.container_id:
            with contextlib.suppress(Exception):
                self._docker.containers.get(pod.container_id).remove(force=True)
        shutil.rmtree(pod.root, ignore_errors=True)
        with self._lock:
            self._ports.discard(pod.port)

    def poll(self, pods: list[Pod], every: float = 0.5) -> bool:
        """Notice containers that died on their own (at most every ``every`` s); True if any did."""
        now = time.monotonic()
        if now - self._last_poll < every:
            return False
        self._last_poll = now
        running = [p for p in pods if p.ready and p.container_id]
        if not running:
            return False
        found = self._docker.containers.list(
            all=True, sparse=True, filters={"label": f"{LABEL_CONTROLLER}={self._id}"}
        )
        status = {c.id: c.status for c in found}
        changed = False
        for pod in running:
            if status.get(pod.container_id) != "running":
                pod.state, pod.message = "Failed", f"the container is {status.get(pod.container_id, 'gone')}"
                changed = True
        return changed

    def close(self) -> None:
        """Remove every container this runtime started, and its files."""
        self._closed.set()
        self._pool.shutdown(wait=True, cancel_futures=True)  # no container is created after this

        def remove(container: Any) -> None:
            with contextlib.suppress(Exception):
                container.remove(force=True)

        with contextlib.suppress(Exception):
            found = self._docker.containers.list(
                all=True, sparse=True, filters={"label": f"{LABEL_CONTROLLER}={self._id}"}
            )
            with ThreadPoolExecutor(max_workers=8) as pool:
                list(pool.map(remove, found))
        shutil.rmtree(self._root, ignore_errors=True)
