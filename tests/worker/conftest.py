"""Fixtures for the worker tests: ``python -m harness_run.worker`` as a real subprocess on 127.0.0.1
(a free port, a token hash, a SQLite or fake-GCS store), the real ``claude`` CLI inside it, and the
scripted model on 127.0.0.1. Workers are stopped by PID with SIGTERM (the graceful path)."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from harness_run import AgentSpec
from harness_run.store import HistoryStore, SessionRecord, open_store
from harness_run.testing import ScriptedModel
from harness_run.vocab.net import free_port

MODEL = "claude-sonnet-4-6"
API_KEY = "scripted-dummy-key"
TOKEN = "worker-test-token-0123456789"
TOKEN_SHA256 = hashlib.sha256(TOKEN.encode()).hexdigest()
CANARY = "canary-7f3a9c1e5b2d4680"

SPEC = AgentSpec(
    name="wk",
    harness="claude-code",
    model=MODEL,
    secrets=[{"name": "CANARY_TOKEN", "required": False}],
    env={"CLAUDE_CODE_MAX_RETRIES": "0"},  # a scripted HTTP error ends the turn at once
)


def model_secrets(model: ScriptedModel, **extra: str) -> dict[str, str]:
    return {"ANTHROPIC_BASE_URL": model.url, "ANTHROPIC_API_KEY": API_KEY, **extra}


@dataclass
class WorkerProcess:
    proc: subprocess.Popen[bytes]
    url: str
    log_path: Path
    store_url: str
    workdir: Path
    started: float
    ready_after: float = 0.0
    extra: dict[str, Any] = field(default_factory=dict[str, Any])

    @property
    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def stop(self, timeout: float = 30.0) -> int:
        """SIGTERM by PID, wait; SIGKILL if it does not exit. Returns the exit code."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        return self.proc.returncode


def wait_healthy(url: str, proc: subprocess.Popen[bytes], log: Path, within: float = 30.0) -> None:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"the worker exited with {proc.returncode}:\n{log.read_text()[-3000:]}")
        try:
            with urllib.request.urlopen(f"{url}/healthz", timeout=1) as resp:
                if resp.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.02)
    pytest.fail(f"the worker at {url} was not healthy within {within} s:\n{log.read_text()[-3000:]}")


def worker_env(
    *, port: int, store_url: str, workdir: Path, spec_path: Path, token_sha256: str | None
) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("ANTHROPIC_", "OPENAI_", "CLAUDE_", "HARNESS_RUN_", "OPENROUTER_"))
    }
    env.update(
        HARNESS_RUN_WORKER_HOST="127.0.0.1",
        HARNESS_RUN_WORKER_PORT=str(port),
        HARNESS_RUN_STORE=store_url,
        HARNESS_RUN_WORKDIR=str(workdir),
        HARNESS_RUN_SPEC=str(spec_path),
        HARNESS_RUN_PODINFO=str(workdir.parent / "no-podinfo"),
        HARNESS_RUN_DIGEST="test-digest",
        PYTHONUNBUFFERED="1",
    )
    if token_sha256:
        env["HARNESS_RUN_WORKER_TOKEN_SHA256"] = token_sha256
    return env


WorkerFactory = Callable[..., WorkerProcess]


@pytest.fixture
def start_worker(tmp_path: Path) -> Iterator[WorkerFactory]:
    """``start_worker(store_url, name="a", spec=SPEC, token_sha256=TOKEN_SHA256)`` -> a healthy worker."""
    started: list[WorkerProcess] = []

    def start(
        store_url: str,
        *,
        name: str = "a",
        spec: AgentSpec = SPEC,
        token_sha256: str | None = TOKEN_SHA256,
        env: dict[str, str] | None = None,
    ) -> WorkerProcess:
        base = tmp_path / f"worker-{name}"
        base.mkdir(exist_ok=True)
        spec_path = base / "spec.json"
        spec_path.write_text(json.dumps(spec.to_dict(), sort_keys=True))
        port = free_port()
        workdir = base / "workdir"
        full_env = worker_env(
            port=port, store_url=store_url, workdir=workdir, spec_path=spec_path, token_sha256=token_sha256
        )
        full_env.update(env or {})
        log_path = base / "worker.log"
        t0 = time.monotonic()
        with log_path.open("wb") as log:
            proc = subprocess.Popen(
                [sys.executable, "-m", "harness_run.worker"],
                env=full_env,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=base,
            )
        url = f"http://127.0.0.1:{port}"
        worker = WorkerProcess(proc, url, log_path, store_url, workdir, t0)
        started.append(worker)
        wait_healthy(url, proc, log_path)
        worker.ready_after = time.monotonic() - t0
        return worker

    yield start
    for worker in started:
        worker.stop()


@pytest.fixture
def model() -> Iterator[ScriptedModel]:
    with ScriptedModel() as scripted:
        yield scripted


@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    return str(tmp_path / "store")


@pytest.fixture(params=["sqlite", "gcs"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return str(tmp_path / "store")
    return str(request.getfixturevalue("gcs_store_url"))


def new_session(store_url: str, spec: AgentSpec = SPEC) -> str:
    """Write a fresh session record, as the sandbox client does before its first turn."""
    store: HistoryStore = open_store(store_url)
    try:
        now = time.time()
        sid = str(uuid.uuid4())
        store.put_session(
            SessionRecord(
                session_id=sid,
                engine=spec.name,
                version="test-digest",
                harness=spec.harness,
                created_at=now,
                updated_at=now,
            )
        )
        return sid
    finally:
        store.close()


@pytest.fixture
def read_store() -> Iterator[Callable[[str], HistoryStore]]:
    opened: list[HistoryStore] = []

    def open_(url: str) -> HistoryStore:
        store = open_store(url)
        opened.append(store)
        return store

    yield open_
    for store in opened:
        store.close()
