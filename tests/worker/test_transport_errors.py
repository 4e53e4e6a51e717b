"""Typed transport errors between the sandbox client and the worker: a refused request raises
``InfrastructureError`` with the answer's ``status`` and ``code``, and the client reacts to those — a
401 right after a claim (the token's hash not yet in the pod's annotations) is retried until the
kubelet delivers it; any other failure is raised at once."""

from __future__ import annotations

import asyncio
import hashlib
import json
import pickle
import time
import uuid

import pytest

from harness_run.errors import InfrastructureError
from harness_run.runtime.worker_client import TurnRequest, WorkerClient
from harness_run.runtime.worker_client._engine import _start
from harness_run.testing import ScriptedModel, text
from harness_run.vocab.k8s import ANNOTATION_TOKEN_SHA256

from .conftest import TOKEN, WorkerFactory, model_secrets, new_session

pytestmark = [pytest.mark.harness, pytest.mark.integration]


def _turn(sid: str, prompt: str, model: ScriptedModel) -> TurnRequest:
    return TurnRequest(turn_id=uuid.uuid4().hex, session_id=sid, prompt=prompt, secrets=model_secrets(model))


async def test_a_401_before_the_token_arrives_is_retried_and_other_failures_are_not(
    start_worker: WorkerFactory, sqlite_url: str, model: ScriptedModel
) -> None:
    model.add(text("after the token arrived"))
    worker = start_worker(sqlite_url, token_sha256=None)  # the hash comes from the pod's annotations
    sid = new_session(sqlite_url)
    annotations = worker.workdir.parent / "no-podinfo" / "annotations"
    async with WorkerClient(worker.url, TOKEN) as client:
        with pytest.raises(InfrastructureError) as refused:
            await client.start_turn(_turn(sid, "too early", model))
        assert (refused.value.status, refused.value.code, refused.value.retryable) == (
            401,
            "unauthorized",
            False,
        )
        copy = pickle.loads(pickle.dumps(refused.value))  # crosses processes with its status and code
        assert (copy.status, copy.code, str(copy)) == (401, "unauthorized", str(refused.value))

        request = _turn(sid, "hello", model)
        starting = asyncio.create_task(_start(client, request))
        await asyncio.sleep(0.8)
        assert not starting.done()  # still retrying the 401s
        annotations.parent.mkdir(parents=True, exist_ok=True)
        annotations.write_text(
            f"{ANNOTATION_TOKEN_SHA256}={json.dumps(hashlib.sha256(TOKEN.encode()).hexdigest())}\n"
        )
        await asyncio.wait_for(starting, 10)
        events = [e async for e in client.events(request.turn_id)]
        assert events[-1]["result"]["text"] == "after the token arrived"

        began = time.monotonic()
        with pytest.raises(InfrastructureError) as too_large:  # not a 401: raised at once, not retried
            await _start(client, _turn(sid, "x" * (17 * 1024 * 1024), model))
        assert time.monotonic() - began < 10
        assert (too_large.value.status, too_large.value.code) == (413, "too_large")
