"""What some benchmarks run beside the turns: a ``harness-run serve`` process, Docker (as the docker
tests have it from ``scripts/services env``), fake GCS and the test cluster (the Kubernetes API
emulator and controller of ``tests/testkit``, a real container per Sandbox)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import urllib.request
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks._common import testkit

# --- the team server ------------------------------------------------------------------------------


def start_server(
    store: Path | str, spec_file: Path, *extra: str, env: dict[str, str] | None = None, stderr: Any = None
) -> tuple[subprocess.Popen[str], str, float]:
    """A `harness-run serve` process on ``store`` serving ``spec_file`` (plus ``extra`` options), its
    URL and the seconds from exec to a healthy /healthz."""
    started = time.perf_counter()
    args = [sys.executable, "-m", "harness_run", "serve", "--store", str(store), "--spec", str(spec_file)]
    args.append("--allow-endpoints")  # the runs name the scripted model's endpoint, with their own key
    proc = subprocess.Popen(
        [*args, *extra, "--port", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL if stderr is None else stderr,
        text=True,
        env=env,
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if "http://" not in line:
        proc.kill()
        raise SystemExit(f"serve did not start: {line!r}")
    url = line.split()[-1]
    while True:
        try:
            with urllib.request.urlopen(f"{url}/healthz", timeout=1) as answer:
                if answer.status == 200:
                    return proc, url, time.perf_counter() - started
        except OSError:
            time.sleep(0.005)


def stop_server(proc: subprocess.Popen[str]) -> None:
    proc.send_signal(signal.SIGTERM)
    proc.wait(30)


def proc_stats(pid: int) -> tuple[float, float, float]:
    """(CPU seconds so far, RSS MB now, peak RSS MB) of a process (the server's), from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    cpu = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    status = dict(
        line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines() if ":" in line
    )
    return cpu, int(status["VmRSS"].split()[0]) / 1024, int(status["VmHWM"].split()[0]) / 1024


def make_key(store: Path) -> str:
    """A new API key of the server on ``store`` (``harness-run serve keys create``)."""
    argv = [sys.executable, "-m", "harness_run", "serve", "keys", "create", "--name", "bench"]
    out = subprocess.run([*argv, "--store", str(store)], capture_output=True, text=True, check=True)
    return out.stdout.split()[-1]


# --- Docker, fake GCS and the test cluster --------------------------------------------------------


@dataclass(frozen=True)
class Docker:
    """Our dockerd and what images are built with (the base image, the CA bundle, the registry)."""

    client: Any
    base_image: str
    ca: str
    """``PIP_CERT``, or "" when unset."""
    registry: str
    """``HARNESS_RUN_TEST_REGISTRY``, or "" when unset."""

    def image_options(self) -> dict[str, Any]:
        """The client, base image and CA files images are built with here."""
        return {
            "docker_client": self.client,
            "base_image": self.base_image,
            "ca_files": [self.ca] if self.ca else [],
        }

    def engine_options(
        self, network_mode: str | None = "host", labels: dict[str, str] | None = None, **more: Any
    ) -> dict[str, Any]:
        """``local.deploy`` options for the container runtime on this dockerd (and ``more``)."""
        from harness_run.local import ContainerOptions, ImageOptions

        container = ContainerOptions(
            image=ImageOptions(base_image=self.base_image, ca_files=[self.ca] if self.ca else []),
            network_mode=network_mode or "host",
            labels=labels or {},
            docker_client=self.client,
        )
        return {"isolation": "container", "container": container, **more}


def docker_env(what: str = "this benchmark", *, ca: bool = False, registry: bool = False) -> Docker:
    """Docker as ``scripts/services env`` sets it up; ``ca``/``registry``: ``PIP_CERT`` and
    ``HARNESS_RUN_TEST_REGISTRY`` are needed too."""
    needed = {"DOCKER_HOST": True, "PIP_CERT": ca, "HARNESS_RUN_TEST_REGISTRY": registry}
    missing = [name for name, need in needed.items() if need and not os.environ.get(name)]
    if missing:
        raise SystemExit(
            f'{what} needs {", ".join(missing)} (as the docker tests): eval "$(scripts/services env)"'
        )
    import docker

    return Docker(
        client=docker.DockerClient(base_url=os.environ["DOCKER_HOST"], timeout=600),
        base_image=os.environ.get("HARNESS_RUN_TEST_BASE_IMAGE", "harness-run/base:trixie"),
        ca=os.environ.get("PIP_CERT", ""),
        registry=os.environ.get("HARNESS_RUN_TEST_REGISTRY", ""),
    )


def bench_labels() -> dict[str, str]:
    """Labels for this run's containers (to find and remove them)."""
    return {"org.harness-run.bench": uuid.uuid4().hex[:12]}


@contextmanager
def fake_gcs() -> Iterator[Any]:
    """A fake-gcs-server on 127.0.0.1, with this process's environment pointing at it."""
    from harness_run.testing import FakeGcsServer

    with FakeGcsServer() as gcs:
        os.environ.update(gcs.env)
        yield gcs


def gcs_store(gcs: Any) -> str:
    """A ``gs://`` store URL in a new bucket of ``gcs``."""
    return f"gs://{gcs.create_bucket('hr-bench-' + uuid.uuid4().hex[:8])}/hr"


@contextmanager
def sandbox_cluster(docker: Docker, gcs: Any, labels: dict[str, str]) -> Iterator[Any]:
    """The Kubernetes API emulator with the test controller running each Sandbox as a container."""
    cluster_kit = testkit("cluster")
    with cluster_kit.ClusterEmulator() as cluster:
        controller = cluster_kit.SandboxController(
            cluster, docker.client, extra_env=dict(gcs.env), labels=labels
        )
        try:
            yield cluster
        finally:
            controller.stop()


def sandbox_deploy(spec: Any, cluster: Any, docker: Docker, store: str, claims: Any, **options: Any) -> Any:
    """``sandbox.deploy`` of ``spec`` on the test cluster, its image in the local registry."""
    from harness_run import sandbox

    return sandbox.deploy(
        spec,
        project="bench-project",
        location="us-central1",
        cluster=sandbox.ClusterTarget(api_client=cluster.api_client()),
        image=sandbox.ImageOptions(
            base_image=docker.base_image,
            ca_files=[docker.ca],
            build_network="host",
            registry=f"{docker.registry}/hr-bench",
        ),
        pods=sandbox.PodOptions(runtime_class=None),
        claims=claims,
        store=store,
        docker_client=docker.client,
        **options,
    )


def wait_pool(kube: Any, pool: str, size: int, timeout: float = 120) -> None:
    """Until the warm pool ``pool`` has ``size`` Ready sandboxes."""
    from harness_run.vocab import k8s

    def ready(obj: dict[str, Any] | None) -> bool:
        return int(((obj or {}).get("status") or {}).get("readyReplicas") or 0) >= size

    kube.wait_for(k8s.SANDBOX_WARM_POOL, pool, ready, timeout)
