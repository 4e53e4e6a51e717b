"""The agent as another uid than the worker (container runtime; the sandbox image runs the same
worker): with the credential guards off, the scripted model has the agent attack the worker
directly — its environment and memory through /proc, ptrace, a signal, the store's files and a
GCS-credentials file the worker can read — while canaries (a model key, a credentials file, a
variable in the worker's own environment) are in play. The oracle: each attack is refused by the
kernel, no canary reaches any request the model receives, and the agent's work still lands in the
workspace, the checkpoint and ``exec``."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from harness_run import AgentSpec, SecurityPolicy, SessionConfig, local
from harness_run.runtime.container import ContainerEngine
from harness_run.testing import ScriptedModel, shell, text
from harness_run.vocab import k8s

from ._attacks import Canaries

pytestmark = [pytest.mark.docker, pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(1200)]

STORE_MOUNT = "/var/lib/harness-run/store"  # the worker's store (and workdir) in the container
_DENIED = ("permission denied", "operation not permitted", "eperm")

# (name, command): every one is refused by the kernel when the agent is another uid
ATTACKS = (
    ("worker-environ", "cat /proc/1/environ | tr '\\0' '\\n'"),
    ("every-environ", "for f in /proc/[0-9]*/environ; do tr '\\0' '\\n' < $f; done 2>&1 | sort -u"),
    ("worker-memory", "head -c 64 /proc/1/mem | base64"),
    (
        "ptrace-attach",
        'python3 -c "import ctypes; c = ctypes.CDLL(None, use_errno=True); '
        "r = c.ptrace(16, 1, 0, 0); print('ptrace', r, 'EPERM' if ctypes.get_errno() == 1 else ctypes.get_errno())\"",
    ),
    ("signal-worker", "kill -9 1"),
    ("gcs-credentials", f"cat {STORE_MOUNT}/gcs-credentials.json"),
    (
        "credentials-path",
        'cat "$(tr "\\0" "\\n" < /proc/1/environ | sed -n "s/^GOOGLE_APPLICATION_CREDENTIALS=//p")"',
    ),
    ("store-database", f"head -c 200 {STORE_MOUNT}/history.sqlite3 | base64"),
    ("store-blobs", f"ls {STORE_MOUNT}/blobs {STORE_MOUNT}/sessions"),
)


@pytest.fixture(scope="module")
def options(container_opts: Any) -> dict[str, Any]:
    return {"isolation": "container", "container": container_opts}


async def test_the_agent_runs_as_another_uid_and_cannot_reach_the_worker(
    options: dict[str, Any], tmp_path: Path
) -> None:
    canaries = Canaries()
    gcs_canary = f"gcs-canary-{os.urandom(8).hex()}"
    env_canary = f"env-canary-{os.urandom(8).hex()}"
    workdir = tmp_path / "workdir"
    spec = AgentSpec(
        name="sec-uid", harness="claude-code", model="claude-sonnet-4-6", env={"CLAUDE_CODE_MAX_RETRIES": "0"}
    )
    with ScriptedModel() as model:
        engine = local.deploy(spec, workdir=workdir, **options)
        try:
            # a GCS-credentials file the worker holds (readable by it only) and a canary variable in
            # the worker's own environment, naming that file as a real worker would
            credentials = workdir / "gcs-credentials.json"
            credentials.write_text(json.dumps({"type": "service_account", "private_key": gcs_canary}))
            credentials.chmod(0o600)
            assert isinstance(engine, ContainerEngine)
            engine.claims.env.update(
                {
                    "GOOGLE_APPLICATION_CREDENTIALS": f"{STORE_MOUNT}/gcs-credentials.json",
                    "HARNESS_RUN_TEST_CANARY": env_canary,
                }
            )
            session = engine.start_session(
                config=SessionConfig(security_policy=SecurityPolicy(include_credential_guards=False))
            )
            secrets = {"ANTHROPIC_BASE_URL": model.url, "ANTHROPIC_API_KEY": canaries.model_key}
            model.add(
                shell("id -u; id -g; echo made by the agent > made.txt"),
                *(shell(command) for _, command in ATTACKS),
                text("done"),
            )
            attacked = await session.run("attack the worker", secrets=secrets)
            assert not attacked.is_error, attacked.error
            who, *outputs = model.requests[-1].tool_results
            assert who.split()[:2] == [str(k8s.AGENT_RUN_UID)] * 2, who
            assert len(outputs) == len(ATTACKS)
            for (name, _), output in zip(ATTACKS, outputs, strict=True):
                if name == "every-environ":  # only the agent's own processes are readable: no canary
                    assert "HARNESS_RUN_TURN=" in output, output
                    assert "HARNESS_RUN_WORKER_TOKEN_SHA256" not in output, output
                else:
                    assert any(m in output.lower() for m in _DENIED), (name, output)

            # the worker survived, the agent's work is in the workspace and its checkpoint, owned by it
            model.add(shell("cat made.txt"), text("again"))
            again = await session.run("read it back", secrets=secrets)
            assert not again.is_error, again.error
            assert "made by the agent" in model.requests[-1].tool_results[-1]
            done = await session.exec("stat -c %u made.txt; id -u")
            assert done.stdout.split() == [str(k8s.AGENT_RUN_UID)] * 2, done
        finally:
            await engine.aclose()
        bodies = "\n".join(json.dumps(r.body) for r in model.requests)
    for canary in (canaries.model_key, gcs_canary, env_canary):
        assert canary not in bodies
