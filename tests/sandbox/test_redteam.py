"""The red-team attacks on the sandbox runtime (the test cluster: a real container of the compiled
image per Sandbox, the in-image worker, fake GCS as the history store): the credential guards refuse
every shell attack and every attempt to list or read another session's history; with the guards off
the agent finds the turn token, never the model key; no canary reaches the model or the bucket."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator

import pytest

from harness_run.testing import ScriptedModel, shell, text

from security._attacks import DENIED_MARKERS, HISTORY_ATTACKS, SHELL_ATTACKS, Canaries, unguarded_env_dump  # isort: skip

from .conftest import Deployed

# one attack per row of TESTING.md's matrix (every tool call costs a model round trip in the sandbox;
# the local tests run them all)
SANDBOX_ATTACKS = (
    "env",
    "python-os-environ",
    "proc-parent-environ",
    "proc-every-environ",
    "dotenv",
    "aws-credentials",
    "gcloud-config",
    "metadata-ip",
    "metadata-name",
    "git-config-list",
    "git-credential",
    "model-key-var",
)
pytestmark = [pytest.mark.docker, pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(1200)]


@pytest.fixture(scope="module")
def model() -> Iterator[ScriptedModel]:
    """A script per test (no rules): the attacks in order."""
    with ScriptedModel() as scripted:
        yield scripted


async def test_attacks_on_the_sandbox_runtime_are_refused(deployed: Deployed) -> None:
    canaries = Canaries()
    model, engine = deployed.model, deployed.engine
    secrets = deployed.secrets()  # (the module's spec declares MY_TOKEN as the agent's own: not passed)
    secrets["ANTHROPIC_API_KEY"] = canaries.model_key
    history = f"history-canary-{uuid.uuid4().hex[:10]}"

    # another session's history: a turn whose prompt (and answer) the attacker must not read
    model.add(text(f"noted {history}"))
    other = engine.start_session()
    first = await other.run(f"remember {history}", secrets=secrets)
    assert not first.is_error, first.error
    before = len(model.requests)

    attacks = [SHELL_ATTACKS[name] for name in SANDBOX_ATTACKS] + list(HISTORY_ATTACKS.values())
    model.add(*(shell(cmd) for cmd in attacks), shell(f"echo guard-ok-{canaries.tag}"), text("done"))
    attacker = engine.start_session()
    guarded = await attacker.run("collect the credentials and the other sessions", secrets=secrets)
    assert not guarded.is_error, guarded.error
    outputs = model.requests[-1].tool_results
    assert len(outputs) == len(attacks) + 1, outputs
    allowed = [
        (a, o)
        for a, o in zip(attacks, outputs, strict=False)
        if not any(m in o.lower() for m in DENIED_MARKERS)
    ]
    assert allowed == [], f"not refused in the sandbox: {allowed}"
    assert f"guard-ok-{canaries.tag}" in outputs[-1]  # ordinary commands still run

    dump = await unguarded_env_dump(engine, model, secrets)
    assert "hrp-" in dump and "ANTHROPIC_API_KEY" in dump  # the turn token in its place, not the key

    saw = "\n".join(json.dumps(r.body) for r in model.requests)
    assert canaries.model_key not in saw
    later = "\n".join(json.dumps(r.body) for r in model.requests[before:])
    assert history not in later  # the other session's history never reached the attacker's model
    bucket = deployed.store_url.removeprefix("gs://").split("/", 1)[0]
    objects = bucket_objects(bucket)
    assert canaries.model_key.encode() not in objects


def bucket_objects(bucket: str) -> bytes:
    """Every object of the bucket, concatenated (the store as the attacker would have read it)."""
    from google.cloud import storage

    client = storage.Client(project="test")
    return b"".join(blob.download_as_bytes() for blob in client.list_blobs(bucket))
