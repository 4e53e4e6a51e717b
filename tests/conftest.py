"""Shared test infrastructure: the CI skip rule, the process-leak guard and the real-service fixtures.

* In CI (``CI=true``) or with ``HARNESS_RUN_STRICT=1`` every skipped test is reported as FAILED, with
  the skip reason in the failure text: CI starts every service the suite needs, so a skip there means
  a broken setup, not a missing laptop dependency. ``xfail`` is unaffected. Tests that can never run
  on these machines (real GKE/GCS) are *deselected* by marker instead of skipped (see ``cloud``).
* An autouse guard fails a test that leaves child processes of the pytest process running after its
  teardown (they are killed and listed). ``HARNESS_RUN_PROCESS_GUARD=0`` turns it off.
* Session fixtures for the real parts started by ``scripts/services`` / ``scripts/base-image``:
  ``docker_client``, ``base_image``, ``registry``, ``claude_binary``, plus ``docker_labels``.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import signal
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Generator, Iterator
from pathlib import Path
from typing import Any

import pytest

pytest_plugins = ["pytester"]

DEFAULT_BASE_IMAGE = "harness-run/base:trixie"
TEST_LABEL = "org.harness-run.test-session"
_SESSION_ID = uuid.uuid4().hex[:12]


def _strict() -> bool:
    return os.environ.get("CI", "").lower() == "true" or os.environ.get("HARNESS_RUN_STRICT") == "1"


# ---------------------------------------------------------------------------------------------
# markers
# ---------------------------------------------------------------------------------------------


def pytest_configure(config: pytest.Config) -> None:
    # pyproject.toml declares docker/harness/slow; these two are declared here as well so the suite
    # works under --strict-markers whatever pyproject says.
    config.addinivalue_line(
        "markers", "integration: uses real services (docker engine, registry, emulators, CLIs)"
    )
    config.addinivalue_line(
        "markers",
        "cloud: needs real GCP/GKE credentials; deselected unless HARNESS_RUN_CLOUD_TESTS=1",
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if os.environ.get("HARNESS_RUN_CLOUD_TESTS") == "1":
        return
    keep: list[pytest.Item] = []
    dropped: list[pytest.Item] = []
    for item in items:
        (dropped if item.get_closest_marker("cloud") else keep).append(item)
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = keep


# ---------------------------------------------------------------------------------------------
# CI: a skip is a failure
# ---------------------------------------------------------------------------------------------


def _skip_reason(longrepr: Any) -> str:
    if isinstance(longrepr, tuple) and len(longrepr) == 3:
        path, lineno, reason = longrepr
        return f"{reason} ({path}:{lineno})"
    return str(longrepr)


_STRICT_MSG = (
    "SKIPPED IN STRICT MODE -> FAILED (CI=true or HARNESS_RUN_STRICT=1: every skip is a failure; "
    "CI starts all the services the suite needs, see TESTING.md). Skip reason: "
)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Generator[None, Any, None]:
    outcome = yield
    report: pytest.TestReport = outcome.get_result()
    if call.when == "teardown":
        leaked = _check_leaked_children(item)
        if leaked and report.outcome != "failed":
            report.outcome = "failed"
            report.longrepr = leaked
    if _strict() and report.skipped and not hasattr(report, "wasxfail"):
        report.outcome = "failed"
        report.longrepr = _STRICT_MSG + _skip_reason(report.longrepr)


@pytest.hookimpl(hookwrapper=True)
def pytest_make_collect_report(collector: pytest.Collector) -> Generator[None, Any, None]:
    # module-level pytest.skip(allow_module_level=True) / importorskip
    outcome = yield
    report: pytest.CollectReport = outcome.get_result()
    if _strict() and report.skipped:
        report.outcome = "failed"
        report.longrepr = _STRICT_MSG + _skip_reason(report.longrepr)


# ---------------------------------------------------------------------------------------------
# process-leak guard (a /proc scan of the pytest process's descendants)
# ---------------------------------------------------------------------------------------------


def _descendants(root: int) -> dict[int, str]:
    """pid -> command line of every live (non-zombie) descendant of ``root``."""
    parent: dict[int, int] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat", "rb") as fh:
                stat = fh.read().decode(errors="replace")
        except OSError:
            continue
        # "pid (comm) state ppid ..." — comm may contain spaces/parens: split after the last ')'
        fields = stat[stat.rfind(")") + 2 :].split()
        if len(fields) < 2 or fields[0] == "Z":
            continue
        parent[int(entry.name)] = int(fields[1])
    found: dict[int, str] = {}
    frontier = [root]
    while frontier:
        p = frontier.pop()
        for child, ppid in parent.items():
            if ppid == p and child not in found:
                try:
                    cmd = (
                        Path(f"/proc/{child}/cmdline")
                        .read_bytes()
                        .replace(b"\0", b" ")
                        .decode(errors="replace")
                    )
                except OSError:
                    cmd = "?"
                found[child] = cmd.strip()
                frontier.append(child)
    return found


def _guard_enabled() -> bool:
    return os.environ.get("HARNESS_RUN_PROCESS_GUARD", "1") != "0" and Path("/proc/self/stat").exists()


_BEFORE_KEY = pytest.StashKey[set[int]]()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Generator[None, None, None]:
    # Snapshot after setup, so that session fixtures started lazily (servers that live for the whole
    # run) are not counted against the first test that uses them.
    if _guard_enabled():
        item.stash[_BEFORE_KEY] = set(_descendants(os.getpid()))
    yield


def _check_leaked_children(item: pytest.Item) -> str | None:
    before = item.stash.get(_BEFORE_KEY, None)
    if before is None or not _guard_enabled():
        return None
    deadline = time.monotonic() + 1.0
    leaked = {p: c for p, c in _descendants(os.getpid()).items() if p not in before}
    while leaked and time.monotonic() < deadline:  # give processes being stopped a moment
        time.sleep(0.05)
        leaked = {p: c for p, c in _descendants(os.getpid()).items() if p not in before}
    if not leaked:
        return None
    for pid in leaked:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)
    lines = "\n".join(f"  pid {p}: {c}" for p, c in sorted(leaked.items()))
    return (
        "test left child processes running after its teardown (now killed); stop what you start "
        f"(HARNESS_RUN_PROCESS_GUARD=0 disables this check):\n{lines}"
    )


# ---------------------------------------------------------------------------------------------
# real-service fixtures
# ---------------------------------------------------------------------------------------------

_HOW_TO_START = (
    'start them with: scripts/services start && eval "$(scripts/services env)" (or run scripts/test)'
)


@pytest.fixture(scope="session")
def docker_client() -> Iterator[Any]:
    """A ``docker.DockerClient`` for ``DOCKER_HOST`` (our dockerd from scripts/services)."""
    docker = pytest.importorskip("docker", reason="the docker SDK is not installed (scripts/bootstrap)")
    host = os.environ.get("DOCKER_HOST", "")
    if not host:
        pytest.skip(f"DOCKER_HOST is not set: no docker engine for the tests; {_HOW_TO_START}")
    try:
        client = docker.DockerClient(base_url=host, timeout=120)
        client.ping()
    except Exception as exc:
        pytest.skip(f"no docker engine answers at DOCKER_HOST={host} ({exc}); {_HOW_TO_START}")
    try:
        yield client
    finally:
        with contextlib.suppress(Exception):
            labelled = {"label": f"{TEST_LABEL}={_SESSION_ID}"}
            for c in client.containers.list(all=True, filters=labelled, ignore_removed=True):
                c.remove(force=True)
        client.close()


@pytest.fixture(scope="session")
def docker_labels() -> dict[str, str]:
    """Labels to put on containers a test creates; the session removes any still present at the end."""
    return {TEST_LABEL: _SESSION_ID}


@pytest.fixture(scope="session")
def base_image(docker_client: Any) -> str:
    """Name of the local base image (``HARNESS_RUN_TEST_BASE_IMAGE``, made by scripts/base-image)."""
    import docker.errors

    name = os.environ.get("HARNESS_RUN_TEST_BASE_IMAGE", DEFAULT_BASE_IMAGE)
    try:
        docker_client.images.get(name)
    except docker.errors.ImageNotFound:
        pytest.skip(f"base image {name} is missing; make it with: scripts/base-image")
    return name


@pytest.fixture(scope="session")
def container_options(docker_client: Any, docker_labels: dict[str, str], base_image: str) -> dict[str, Any]:
    """``local.deploy(..., isolation="container")`` options on the test services: our dockerd, the
    base image, the registry proxy's CA for the image build, the host network (the scripted model
    is on 127.0.0.1) and the test labels."""
    ca = os.environ.get("PIP_CERT")
    if not ca or not Path(ca).is_file():
        pytest.skip("PIP_CERT does not name the registry proxy's CA file; the image build cannot reach PyPI")
    return {
        "docker_client": docker_client,
        "base_image": base_image,
        "ca_files": [ca],
        "network_mode": "host",
        "labels": docker_labels,
    }


@pytest.fixture(scope="session")
def container_opts(container_options: dict[str, Any]) -> Any:
    """The same settings as ``local.deploy(..., isolation="container", container=ContainerOptions(...))``."""
    from harness_run.local import ContainerOptions, ImageOptions

    return ContainerOptions(
        image=ImageOptions(
            base_image=container_options["base_image"], ca_files=container_options["ca_files"]
        ),
        network_mode=container_options["network_mode"],
        labels=container_options["labels"],
        docker_client=container_options["docker_client"],
    )


@pytest.fixture(scope="session")
def registry() -> str:
    """``host:port`` of the local image registry (``HARNESS_RUN_TEST_REGISTRY``)."""
    addr = os.environ.get("HARNESS_RUN_TEST_REGISTRY", "")
    if not addr:
        pytest.skip(f"HARNESS_RUN_TEST_REGISTRY is not set: no local registry; {_HOW_TO_START}")
    try:
        with urllib.request.urlopen(f"http://{addr}/v2/", timeout=5) as resp:
            if resp.status != 200:
                pytest.skip(f"registry at {addr} answered GET /v2/ with HTTP {resp.status}")
    except (urllib.error.URLError, OSError) as exc:
        pytest.skip(f"no registry answers at http://{addr}/v2/ ({exc}); {_HOW_TO_START}")
    return addr


@pytest.fixture(scope="session")
def claude_binary() -> Path:
    """The Claude Code binary bundled in the claude-agent-sdk wheel, found without importing the SDK."""
    spec = importlib.util.find_spec("claude_agent_sdk")
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("claude-agent-sdk is not installed (scripts/bootstrap installs it with the test extra)")
    for location in spec.submodule_search_locations:
        candidate = Path(location) / "_bundled" / "claude"
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return candidate
    pytest.skip(
        f"no executable _bundled/claude in claude_agent_sdk at {list(spec.submodule_search_locations)}"
    )


@pytest.fixture(scope="session")
def fake_gcs() -> Iterator[Any]:
    """A ``FakeGcsServer`` (fake-gcs-server on 127.0.0.1) for the whole run; sets STORAGE_EMULATOR_HOST."""
    from harness_run.errors import InfrastructureError
    from harness_run.testing._gcs import FakeGcsServer

    try:
        server = FakeGcsServer().start()
    except InfrastructureError as exc:
        pytest.skip(f"no fake-gcs-server: {exc}")
    previous = os.environ.get("STORAGE_EMULATOR_HOST")
    os.environ.update(server.env)
    try:
        yield server
    finally:
        server.stop()
        if previous is None:
            os.environ.pop("STORAGE_EMULATOR_HOST", None)
        else:
            os.environ["STORAGE_EMULATOR_HOST"] = previous


@pytest.fixture
def gcs_store_url(fake_gcs: Any) -> str:
    """``gs://<fresh bucket>/hr`` on the session's fake GCS: open it with ``open_store``."""
    bucket = fake_gcs.create_bucket(f"hr-{uuid.uuid4().hex[:16]}")
    return f"gs://{bucket}/hr"
