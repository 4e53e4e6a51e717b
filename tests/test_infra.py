"""Tests of the test infrastructure itself, with its real parts: the docker engine and base image from
scripts/services + scripts/base-image, the local registry, the bundled Claude Code binary, and the
conftest rules (skip -> failure in CI, the process-leak guard)."""

from __future__ import annotations

import contextlib
import io
import json
import subprocess
import tarfile
import textwrap
import urllib.request
import uuid
from pathlib import Path
from typing import Any

import pytest

CONFTEST = Path(__file__).with_name("conftest.py")


# ---------------------------------------------------------------------------------------------
# docker engine + base image
# ---------------------------------------------------------------------------------------------


@pytest.mark.docker
@pytest.mark.integration
def test_base_image_runs_python_without_network(
    docker_client: Any, base_image: str, docker_labels: dict[str, str]
) -> None:
    out = docker_client.containers.run(
        base_image,
        ["python3", "-c", "import sys; print(1, sys.version_info >= (3, 12))"],
        network_mode="none",
        labels=docker_labels,
        remove=True,
    )
    assert out.decode().split() == ["1", "True"]


@pytest.mark.docker
@pytest.mark.integration
def test_network_none_container_has_only_loopback(
    docker_client: Any, base_image: str, docker_labels: dict[str, str]
) -> None:
    out = docker_client.containers.run(
        base_image, ["ls", "/sys/class/net"], network_mode="none", labels=docker_labels, remove=True
    )
    assert out.decode().split() == ["lo"]


@pytest.mark.docker
@pytest.mark.integration
def test_base_image_has_the_tools_builds_need(
    docker_client: Any, base_image: str, docker_labels: dict[str, str]
) -> None:
    script = (
        "git --version && curl --version | head -n1 && python3 -m venv /tmp/v && /tmp/v/bin/pip --version"
    )
    out = docker_client.containers.run(
        base_image, ["sh", "-c", script], network_mode="none", labels=docker_labels, remove=True
    )
    text = out.decode()
    assert "git version" in text
    assert "curl " in text
    assert "pip " in text


# ---------------------------------------------------------------------------------------------
# local registry
# ---------------------------------------------------------------------------------------------


def _tiny_rootfs() -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        data = f"harness-run registry test {uuid.uuid4()}\n".encode()
        info = tarfile.TarInfo("hello.txt")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


@pytest.mark.docker
@pytest.mark.integration
def test_registry_push_then_pull_by_digest(docker_client: Any, registry: str) -> None:
    import docker.errors

    repo = f"{registry}/harness-run-test/tiny"
    tag = uuid.uuid4().hex[:10]
    # a one-file image (docker import of a tiny tarball): pushing the 300 MB base would only cost time
    result = docker_client.api.import_image_from_data(_tiny_rootfs(), repository=repo, tag=tag)
    image_id = json.loads(result.strip().splitlines()[-1])["status"]
    assert image_id.startswith("sha256:")
    pulled_ref = ""
    try:
        digest = ""
        for line in docker_client.images.push(repo, tag=tag, stream=True, decode=True):
            assert "error" not in line, line
            digest = line.get("aux", {}).get("Digest", digest)
        assert digest.startswith("sha256:"), "push reported no manifest digest"

        # the registry serves the manifest by digest
        req = urllib.request.Request(
            f"http://{registry}/v2/harness-run-test/tiny/manifests/{digest}",
            headers={
                "Accept": "application/vnd.docker.distribution.manifest.v2+json, "
                "application/vnd.oci.image.manifest.v1+json"
            },
        )
        with urllib.request.urlopen(req, timeout=10) as resp:
            assert resp.status == 200
            assert resp.headers["Docker-Content-Digest"] == digest

        # drop the local copy, pull it back by digest: same image
        docker_client.images.remove(f"{repo}:{tag}", force=True)
        with pytest.raises(docker.errors.ImageNotFound):
            docker_client.images.get(image_id)
        pulled_ref = f"{repo}@{digest}"
        pulled = docker_client.images.pull(pulled_ref)
        assert pulled.id == image_id
        assert pulled_ref in pulled.attrs["RepoDigests"]
    finally:
        for ref in (f"{repo}:{tag}", pulled_ref):
            if ref:
                with contextlib.suppress(docker.errors.ImageNotFound):
                    docker_client.images.remove(ref, force=True)


# ---------------------------------------------------------------------------------------------
# the bundled harness binary
# ---------------------------------------------------------------------------------------------


@pytest.mark.harness
def test_bundled_claude_binary_runs(claude_binary: Path) -> None:
    proc = subprocess.run(
        [str(claude_binary), "--version"], capture_output=True, text=True, timeout=60, check=False
    )
    assert proc.returncode == 0, proc.stderr
    assert "Claude Code" in proc.stdout


# ---------------------------------------------------------------------------------------------
# conftest rules, checked on an inner pytest run
# ---------------------------------------------------------------------------------------------


def _inner_project(pytester: pytest.Pytester) -> None:
    pytester.makeconftest(CONFTEST.read_text())
    pytester.makeini("[pytest]\nasyncio_default_fixture_loop_scope = function\n")


INNER_TESTS = textwrap.dedent(
    """
    import pytest

    def test_runtime_skip():
        pytest.skip("no frobnicator here")

    @pytest.mark.skipif(True, reason="static skip reason")
    def test_marked_skip():
        pass

    @pytest.mark.xfail(reason="expected")
    def test_xfail():
        assert False

    def test_ok():
        pass
    """
)


@pytest.mark.parametrize(
    ("env", "strict"),
    [
        ({"CI": "true"}, True),
        ({"HARNESS_RUN_STRICT": "1"}, True),
        ({}, False),
    ],
    ids=["CI=true", "HARNESS_RUN_STRICT=1", "laptop"],
)
def test_skips_fail_in_ci(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, env: dict[str, str], strict: bool
) -> None:
    for name in ("CI", "HARNESS_RUN_STRICT"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    _inner_project(pytester)
    pytester.makepyfile(test_inner=INNER_TESTS)
    result = pytester.runpytest_inprocess("-p", "no:cacheprovider", "-rA")
    if strict:
        # a skip in setup (skipif, skipping fixtures) fails as an error, one in the test body as a failure
        result.assert_outcomes(passed=1, failed=1, errors=1, xfailed=1)
        result.stdout.fnmatch_lines(["*SKIPPED IN STRICT MODE*no frobnicator here*"])
        result.stdout.fnmatch_lines(["*SKIPPED IN STRICT MODE*static skip reason*"])
        assert result.ret == pytest.ExitCode.TESTS_FAILED
    else:
        result.assert_outcomes(passed=1, skipped=2, xfailed=1)
        assert result.ret == pytest.ExitCode.OK


def test_module_level_skip_fails_in_ci(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CI", "true")
    _inner_project(pytester)
    pytester.makepyfile(
        test_inner="""
        import pytest
        pytest.importorskip("no_such_module_for_harness_run_tests")

        def test_never():
            pass
        """
    )
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-p", "no:hypothesispytest")
    assert result.ret != pytest.ExitCode.OK
    result.stdout.fnmatch_lines(["*SKIPPED IN STRICT MODE*no_such_module_for_harness_run_tests*"])


def test_leftover_child_process_fails_the_test(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("CI", raising=False)
    monkeypatch.delenv("HARNESS_RUN_STRICT", raising=False)
    monkeypatch.delenv("HARNESS_RUN_PROCESS_GUARD", raising=False)
    _inner_project(pytester)
    pytester.makepyfile(
        test_inner="""
        import subprocess

        def test_leaks():
            subprocess.Popen(["sleep", "300"])

        def test_cleans_up():
            p = subprocess.Popen(["sleep", "300"])
            p.kill()
            p.wait()
        """
    )
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-p", "no:hypothesispytest")
    result.assert_outcomes(passed=2, errors=1)
    result.stdout.fnmatch_lines(["*left child processes running*", "*sleep 300*"])
