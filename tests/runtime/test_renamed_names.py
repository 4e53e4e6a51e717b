"""Names that say what they are (issue 26 item 4): the worker's and the team server's clients under
their new module names, ``ContainerOptions`` for ``local.deploy``'s container-only options, and the
old names still working for one release, with a ``DeprecationWarning`` naming the replacement."""

from __future__ import annotations

import importlib
import subprocess
import sys
from pathlib import Path

import pytest

import harness_run
from harness_run import AgentSpec, local, sandbox
from harness_run.errors import InfrastructureError, UsageError
from harness_run.local import ContainerOptions, ImageOptions
from harness_run.runtime import server_client, worker_client
from harness_run.runtime.local import LocalEngine

SPEC = AgentSpec(name="names", harness="claude-code", model="claude-sonnet-4-6")


@pytest.mark.parametrize(
    ("old", "new", "names"),
    [
        (
            "harness_run.runtime.remote",
            worker_client,
            ["WorkerEngine", "WorkerClient", "HeldClaims", "TurnRequest"],
        ),
        ("harness_run.runtime.http", server_client, ["connect", "ServerHistory", "Wire", "ServerEngine"]),
    ],
)
def test_old_module_names_warn_and_are_the_new_modules_names(old: str, new: object, names: list[str]) -> None:
    sys.modules.pop(old, None)
    with pytest.warns(DeprecationWarning, match=rf"{old} is deprecated: import from {new.__name__}"):  # type: ignore[attr-defined]
        module = importlib.import_module(old)
    for name in names:
        assert getattr(module, name) is getattr(new, name)
    assert set(module.__all__) >= set(new.__all__)  # type: ignore[attr-defined]


def test_the_new_module_names_import_without_a_warning() -> None:
    code = (
        "import harness_run.runtime.worker_client, harness_run.runtime.server_client, harness_run.local\n"
        "from harness_run import connect\n"
        "print(connect.__module__)"
    )
    proc = subprocess.run(
        [sys.executable, "-W", "error::DeprecationWarning", "-c", code],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "harness_run.runtime.server_client._engine"


def test_connect_returns_a_server_engine_and_http_engine_is_its_deprecated_name() -> None:
    assert harness_run.connect is server_client.connect
    assert server_client.connect.__annotations__["return"] == "ServerEngine"
    with pytest.warns(DeprecationWarning, match="HttpEngine is deprecated: use ServerEngine"):
        old = server_client.HttpEngine  # pyright: ignore[reportAttributeAccessIssue]
    assert old is server_client.ServerEngine
    with pytest.raises(AttributeError, match="no attribute 'NoSuchEngine'"):
        _ = server_client.NoSuchEngine  # pyright: ignore[reportAttributeAccessIssue]


def test_container_options_compose_the_compilers_image_options() -> None:
    options = ContainerOptions(
        image=ImageOptions(base_image="img:1", ca_files=["ca.pem"]), network_mode="none"
    )
    assert options.build_image.build_network == "none"  # the build uses the containers' network mode
    assert options.build_image.base_image == "img:1" and options.build_image.ca_files == ("ca.pem",)
    assert ContainerOptions(image=ImageOptions(build_network="bridge")).build_image.build_network == "bridge"
    assert dict(ContainerOptions(labels={"team": "a"}).labels) == {"team": "a"}
    assert local.ImageOptions is sandbox.ImageOptions  # one ImageOptions for both runtimes
    with pytest.raises(UsageError, match=r"ContainerOptions.image.registry .* leave registry=None"):
        ContainerOptions(image=ImageOptions(registry="127.0.0.1:5000/agents"))
    with pytest.raises(UsageError, match=r"ContainerOptions\.image takes an ImageOptions"):
        ContainerOptions(image="img:1")  # type: ignore[arg-type]
    with pytest.raises(UsageError, match=r"ContainerOptions\.network_mode must name"):
        ContainerOptions(network_mode="")
    with pytest.raises(UsageError, match=r"ContainerOptions\.labels maps names to strings"):
        ContainerOptions(labels={"n": 1})  # type: ignore[dict-item]


def test_container_options_reach_the_docker_engine(tmp_path: Path) -> None:
    docker = pytest.importorskip("docker")
    dead = docker.DockerClient(base_url=f"unix://{tmp_path}/no-docker.sock", version="1.41", timeout=2)
    with pytest.raises(InfrastructureError, match=r"no Docker engine answers .*start Docker"):
        local.deploy(
            SPEC, workdir=tmp_path, isolation="container", container=ContainerOptions(docker_client=dead)
        )


def test_the_old_container_keywords_warn_and_still_work(tmp_path: Path) -> None:
    docker = pytest.importorskip("docker")
    dead = docker.DockerClient(base_url=f"unix://{tmp_path}/no-docker.sock", version="1.41", timeout=2)
    replacement = (
        r"local.deploy\(base_image=, docker_client=, labels=\) is deprecated .* pass "
        r"container=ContainerOptions\(image=ImageOptions\(base_image=...\), labels=..., docker_client=...\)"
    )
    # the old keywords still reach the container runtime: here, the Docker client they name
    with (
        pytest.warns(DeprecationWarning, match=replacement),
        pytest.raises(InfrastructureError, match="no Docker engine answers"),
    ):
        local.deploy(
            SPEC,
            workdir=tmp_path,
            isolation="container",
            base_image="img:1",
            docker_client=dead,
            labels={"team": "a"},
        )
    # and, as before, they change nothing for processes (but warn all the same)
    with pytest.warns(DeprecationWarning, match=r"local.deploy\(network_mode=\) is deprecated"):
        engine = local.deploy(SPEC, workdir=tmp_path / "proc", network_mode="host")
    assert isinstance(engine, LocalEngine)
    engine.close()


def test_both_forms_at_once_is_a_usage_error_naming_the_fields(tmp_path: Path) -> None:
    with pytest.raises(
        UsageError,
        match=r"got both container=ContainerOptions\(...\) and ca_files=, network_mode=; move ca_files, "
        r"network_mode into it: container=ContainerOptions\(image=ImageOptions\(ca_files=...\), network_mode=...\)",
    ):
        local.deploy(
            SPEC,
            workdir=tmp_path,
            isolation="container",
            container=ContainerOptions(),
            ca_files=["ca.pem"],
            network_mode="host",
        )
    with pytest.raises(UsageError, match=r"container=ContainerOptions\(...\)\) is for isolation='container'"):
        local.deploy(SPEC, workdir=tmp_path, container=ContainerOptions())
    with pytest.raises(TypeError, match="unexpected keyword argument 'base_imag'"):
        local.deploy(SPEC, workdir=tmp_path, isolation="container", base_imag="img:1")  # type: ignore[call-arg]
