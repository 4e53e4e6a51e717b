"""The sandbox runtime end to end: deploy to the test cluster, turns in real containers of the
compiled image, history in fake GCS, re-attach, races, faults, secrets.

Every turn here runs the real ``claude`` inside a container (host network) against the scripted
model on 127.0.0.1; Kubernetes is the validating emulator with the test controller.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from harness_run.errors import InfrastructureError, SessionBusyError, SessionNotFoundError, UsageError
from harness_run.events import ResultEvent, ToolResultEvent
from harness_run.vocab import k8s

from .conftest import CANARY, LOCATION, PROJECT, Deployed

pytestmark = [pytest.mark.docker, pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(900)]

HERE = Path(__file__).resolve().parent


@pytest.fixture
async def engine(deployed: Deployed) -> AsyncIterator[Any]:
    """A fresh client-side engine per test (its own claims, on this test's event loop)."""
    eng = deployed.get_engine(idle_ttl=60.0, claim_timeout=60.0)
    yield eng
    await eng.aclose()


def _claims(d: Deployed, session_id: str | None = None) -> list[dict[str, Any]]:
    from harness_run.runtime.sandbox._claims import LABEL_SESSION
    from harness_run.runtime.sandbox._kube import Kube

    kube = Kube(d.cluster.api_client(), "default")
    return kube.list(k8s.SANDBOX_CLAIM, {LABEL_SESSION: session_id} if session_id else None)


async def _released(d: Deployed, session_id: str, within: float = 30.0) -> bool:
    """Whether the session's claim is gone within ``within`` s: the client releases it in a task
    of its own (an API call), so a fixed sleep raced it on a loaded machine."""
    deadline = time.monotonic() + within
    while _claims(d, session_id):
        if time.monotonic() > deadline:
            return False
        await asyncio.sleep(0.1)
    return True


def _tool_outputs(events: list[Any]) -> str:
    return "\n".join(e.content for e in events if isinstance(e, ToolResultEvent))


# --- deploy and lookup ---------------------------------------------------------------------------


def test_deploy_applies_valid_objects_and_records_the_engine(deployed: Deployed) -> None:
    eng = deployed.engine
    versions = eng.versions()
    assert [v.version for v in versions] == [eng.version]
    assert versions[0].runtime == "sandbox"
    # the emulator validates every object against the CRD schemas in Strict mode; nothing was pruned
    assert deployed.cluster.warnings == []
    from harness_run.runtime.sandbox._kube import Kube

    kube = Kube(deployed.cluster.api_client(), "default")
    template = kube.get(k8s.SANDBOX_TEMPLATE, eng.template)
    assert template is not None
    pod = template["spec"]["podTemplate"]["spec"]
    env = {e["name"]: e.get("value") for e in pod["containers"][0].get("env", [])}
    assert env["HARNESS_RUN_STORE"] == deployed.store_url
    assert env["HARNESS_RUN_VERTEX_PROJECT"] == PROJECT
    assert "HARNESS_RUN_VERTEX_REGION" not in env  # the spec names none: the worker uses "global"
    assert kube.get(k8s.SANDBOX_WARM_POOL, eng.pool) is not None


def test_noop_redeploy_builds_and_pushes_nothing(
    deployed: Deployed, capsys: pytest.CaptureFixture[str]
) -> None:
    began = time.time()
    started = time.perf_counter()
    again = deployed.deploy(progress=True)
    seconds = time.perf_counter() - started
    err = capsys.readouterr().err
    with capsys.disabled():
        print(f"\nno-op redeploy: {seconds:.2f} s")
    assert again.version == deployed.engine.version
    assert "already in the registry: nothing to build or push" in err
    assert "pushing" not in err
    # the Docker engine saw no build (it would tag the image) and no push
    events = deployed.docker_client.events(
        since=int(began) - 1, until=int(time.time()) + 1, filters={"type": "image"}, decode=True
    )
    actions = [e.get("Action") or e.get("status") for e in events if e.get("timeNano", 0) >= began * 1e9]
    assert not [a for a in actions if a in ("tag", "push", "build")], actions
    assert [v.version for v in again.versions()] == [deployed.engine.version]


def test_get_engine_errors_name_what_to_deploy(deployed: Deployed) -> None:
    from harness_run import sandbox

    with pytest.raises(UsageError, match=r"deploy it first with harness_run\.sandbox\.deploy"):
        sandbox.get_engine(
            "nope",
            project=PROJECT,
            location=LOCATION,
            store=deployed.store_url,
            cluster=sandbox.ClusterTarget(api_client=deployed.cluster.api_client()),
        )
    with pytest.raises(UsageError, match="version 'ffff'"):
        deployed.get_engine(version="ffff")
    assert deployed.get_engine(version=deployed.engine.version[:8]).version == deployed.engine.version
    with pytest.raises(SessionNotFoundError, match="list_sessions"):
        deployed.get_engine().get_session("00000000-0000-4000-8000-000000000000")


# --- turns ---------------------------------------------------------------------------------------


async def test_run_then_send_resumes_on_a_new_claim(deployed: Deployed) -> None:
    eng = deployed.get_engine(idle_ttl=0.0, claim_timeout=60.0)  # release the sandbox after each turn
    try:
        session = eng.start_session()
        first = await session.run("write the file out.txt", secrets=deployed.secrets())
        assert not first.is_error, first.error
        assert first.text == "done"
        assert await _released(deployed, session.session_id)  # auto-paused
        run = session.send("now read the file back", secrets=deployed.secrets())
        second = await run
        assert not second.is_error, second.error
        assert "hello-from-turn-1" in _tool_outputs(run.events)  # the workspace came back from GCS
        assert [t.turn for t in session.history()] == [1, 2]
        assert session.record.turns == 2
        stored = [e.type for e in session.events(2)]
        assert stored[0] == "user" and stored[-1] == "result"
        assert [e.type for e in run.events] == stored
    finally:
        await eng.aclose()


async def test_idle_claim_is_reused_then_released(deployed: Deployed) -> None:
    eng = deployed.get_engine(idle_ttl=2.0, claim_timeout=60.0)
    try:
        session = eng.start_session()
        assert not (await session.run("just answer", secrets=deployed.secrets())).is_error
        held = _claims(deployed, session.session_id)
        assert len(held) == 1
        assert not (await session.send("just answer again", secrets=deployed.secrets())).is_error
        assert [c["metadata"]["name"] for c in _claims(deployed, session.session_id)] == [
            held[0]["metadata"]["name"]
        ]
        out = await session.exec("cat out.txt || echo missing; echo $HOME")
        assert out.exit_code == 0
        assert await _released(deployed, session.session_id)  # idle_ttl (2 s) after the exec
    finally:
        await eng.aclose()


async def test_reattach_from_another_process(deployed: Deployed, engine: Any) -> None:
    session = engine.start_session()
    # the other process is made ready first: its start-up (seconds on a loaded machine) raced the
    # turn's `sleep 6` when it started after the tool call; it re-attaches on cue instead
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        str(HERE / "attach_proc.py"),
        "attach",
        deployed.store_url,
        str(deployed.kubeconfig),
        session.session_id,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    assert proc.stdin is not None and proc.stdout is not None
    ready = await asyncio.wait_for(proc.stdout.readline(), 120)
    assert ready.strip() == b"ready", (await proc.communicate())[1].decode()[-3000:]
    run = session.run("take your time, then answer", secrets=deployed.secrets())
    async for event in run:  # wait until the turn is really running in the sandbox
        if event.type == "tool_use":
            break
    proc.stdin.write(b"attach\n")
    await proc.stdin.drain()
    proc.stdin.close()
    out, err = await asyncio.wait_for(proc.communicate(), 120)
    assert proc.returncode == 0, err.decode()[-3000:]
    seen = json.loads(out.decode().strip().splitlines()[-1])
    result = await run
    assert not result.is_error, result.error
    assert seen["turn"] == 1
    assert seen["text"] == result.text
    assert seen["types"] == [e.type for e in run.events]  # every event from offset 0, same order


async def test_client_killed_mid_turn_another_process_gets_the_rest(deployed: Deployed, engine: Any) -> None:
    session = engine.start_session()
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        str(HERE / "attach_proc.py"),
        "start",
        deployed.store_url,
        str(deployed.kubeconfig),
        session.session_id,
        deployed.model.url,
        "take your time, then answer",
        stdout=asyncio.subprocess.PIPE,
    )
    assert proc.stdout is not None
    line = await asyncio.wait_for(proc.stdout.readline(), 120)
    assert line.strip() == b"running"
    proc.kill()  # the client dies; its turn goes on in the sandbox
    await proc.wait()
    again = engine.get_session(session.session_id)  # this process never saw the turn
    run = again.current_run
    assert run is not None and run.turn == 1
    result = await asyncio.wait_for(run.wait(), 120)
    assert not result.is_error, result.error
    assert "slept" in _tool_outputs(run.events)
    assert [e.type for e in run.events] == [e.type for e in again.events(1)]
    assert again.record.turns == 1 and again.status == "idle"
    assert _claims(deployed, session.session_id) == []  # the dead client's claim was cleaned up
    follow_up = await again.send("just answer", secrets=deployed.secrets())
    assert not follow_up.is_error, follow_up.error


async def test_interrupt_and_steer_reach_the_worker(deployed: Deployed, engine: Any) -> None:
    session = engine.start_session()
    run = session.run("take your time, then answer", secrets=deployed.secrets())
    async for event in run:
        if event.type == "tool_use":
            break
    steered = session.send("also mention the weather", message_id="steer-1")
    assert steered is run
    # the steer is posted in a task: interrupt once the worker has delivered it into the turn
    deadline = time.monotonic() + 60
    while not any(e.type == "user" and e.text == "also mention the weather" for e in run.events):
        assert time.monotonic() < deadline and not run.done, "the steer was never delivered"
        await asyncio.sleep(0.05)
    await session.interrupt()
    result = await run
    assert result.stop_reason == "interrupted"
    users = [e for e in run.events if e.type == "user"]
    assert [u.text for u in users][1:] == ["also mention the weather"]  # delivered into the turn
    assert session.record.turns == 1
    assert session.history()[-1].result.stop_reason == "interrupted"


async def test_cancelling_the_await_stops_the_turn_in_the_sandbox(deployed: Deployed, engine: Any) -> None:
    session = engine.start_session()
    run = session.run("take your time, then answer", secrets=deployed.secrets())
    waiter = asyncio.ensure_future(run.wait())
    async for event in run:
        if event.type == "tool_use":
            break
    waiter.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiter
    assert run.result is not None and run.result.stop_reason in ("interrupted", "cancelled")
    assert session.status != "running"
    assert session.history()[-1].turn == 1
    after = await session.send("just answer", secrets=deployed.secrets())
    assert not after.is_error, after.error
    assert session.record.turns == 2


async def test_concurrent_send_from_two_clients_runs_one_turn(deployed: Deployed, engine: Any) -> None:
    session = engine.start_session()
    other = deployed.get_engine(idle_ttl=0.0)
    try:
        twin = other.get_session(session.session_id)
        run = session.run("just answer", secrets=deployed.secrets())
        with pytest.raises(SessionBusyError, match=r"re-attach with engine\.get_session"):
            twin.run("just answer too", secrets=deployed.secrets())
        assert twin.current_run is None  # the refused client can go on
        result = await run
        assert not result.is_error, result.error
        assert [t.turn for t in session.history()] == [1]
        assert twin.record.turns in (0, 1)
    finally:
        await other.aclose()


async def test_turns_through_a_router_with_the_sandbox_id_header(deployed: Deployed) -> None:
    """``router_url=``: every worker call goes to one address with ``X-Sandbox-ID: <sandbox>``
    (a gateway in front of the pods); here a small proxy resolves the id through the cluster."""
    import aiohttp
    from aiohttp import web

    from harness_run.runtime.sandbox._kube import Kube

    kube = Kube(deployed.cluster.api_client(), "default")
    seen: list[str] = []

    async def proxy(request: web.Request) -> web.StreamResponse:
        box = request.headers["X-Sandbox-ID"]
        seen.append(box)
        obj = await asyncio.to_thread(kube.get, k8s.SANDBOX, box)
        assert obj is not None
        port = obj["metadata"]["annotations"][k8s.ANNOTATION_WORKER_PORT]
        headers = {k: v for k, v in request.headers.items() if k.lower() not in ("host", "x-sandbox-id")}
        async with (
            aiohttp.ClientSession() as http,
            http.request(
                request.method,
                f"http://127.0.0.1:{port}{request.path_qs}",
                headers=headers,
                data=await request.read(),
            ) as upstream,
        ):
            response = web.StreamResponse(status=upstream.status)
            response.content_type = upstream.content_type
            await response.prepare(request)
            async for chunk in upstream.content.iter_any():
                await response.write(chunk)
            await response.write_eof()
            return response

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", proxy)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    eng = deployed.get_engine(router_url=f"http://127.0.0.1:{port}", idle_ttl=0.0)
    try:
        result = await eng.start_session().run("just answer", secrets=deployed.secrets())
        assert not result.is_error, result.error
        assert result.text == "plain answer"
        assert seen and len(set(seen)) == 1  # one sandbox, named in every request
    finally:
        await eng.aclose()
        await runner.cleanup()


async def test_a_warm_claim_works_at_once_and_the_worker_refuses_a_wrong_token(
    deployed: Deployed, engine: Any
) -> None:
    """The kubelet has not written the claimed warm pod's annotations (no token hash there): the
    claim's ticket in the store lets the first request in; the worker pins that token, so a wrong
    token and even another ticketed token get 401 and nothing runs."""
    import hashlib

    from harness_run.runtime.worker_client import TurnRequest, WorkerClient
    from harness_run.store import engine_view, open_store
    from harness_run.vocab.k8s import CLAIM_TICKET

    deployed.controller.late_podinfo = True
    try:
        session = engine.start_session()
        first = await session.run("just answer", secrets=deployed.secrets())
    finally:
        deployed.controller.late_podinfo = False
    assert not first.is_error, first.error
    claim = engine.claims.held(session.session_id)
    assert claim is not None
    assert claim.sandbox in deployed.controller.podinfo_skipped  # warm, and no annotation reached it
    store = engine_view(open_store(deployed.store_url), engine.name)  # tickets live in the engine's folder
    other = hashlib.sha256(b"another-claims-token").hexdigest()
    ticket = store.put_blob(CLAIM_TICKET + other.encode())  # a real ticket, for another claim
    before = len(deployed.model.requests)
    try:
        for token in ("wrong-token", "another-claims-token"):
            async with WorkerClient(claim.url, token, unreachable_after=2) as bad:
                assert (await bad.health()).status == "ok"  # health needs no token
                with pytest.raises(InfrastructureError, match="401"):
                    await bad.start_turn(
                        TurnRequest(turn_id="x", session_id=session.session_id, prompt="just answer", turn=2)
                    )
    finally:
        store.delete_blob(ticket)
    assert len(deployed.model.requests) == before  # nothing ran
    assert session.history()[-1].turn == 1
    second = await session.send("just answer", secrets=deployed.secrets())  # the pinned token still works
    assert not second.is_error, second.error
    (key,) = engine.claims._tickets.values()  # the claim's own ticket, gone with the claim
    assert store.get_blob(key) is not None
    await engine.claims.release(claim)
    assert store.get_blob(key) is None


async def test_the_agent_cannot_reach_the_worker_in_the_sandbox(deployed: Deployed, engine: Any) -> None:
    """With the credential guards off, the agent (uid 1001) attacks the worker (PID 1, uid 1000):
    its environment, memory and a signal are refused by the kernel, and the worker keeps serving."""
    from harness_run import SecurityPolicy, SessionConfig

    session = engine.start_session(
        config=SessionConfig(security_policy=SecurityPolicy(include_credential_guards=False))
    )
    run = session.send("attack the worker", secrets=deployed.secrets())
    result = await run
    assert not result.is_error, result.error
    output = _tool_outputs(run.events)
    assert str(k8s.AGENT_RUN_UID) in output.splitlines(), output
    assert output.count("Permission denied") >= 2 and "Operation not permitted" in output, output
    assert "HARNESS_RUN_STORE" not in output and deployed.store_url not in output  # the worker's env
    assert (await session.exec("echo alive")).stdout == "alive\n"  # the worker survived the kill


async def test_claim_never_ready_times_out_naming_the_pool(deployed: Deployed) -> None:
    from harness_run.store import open_store

    store = open_store(deployed.store_url)
    record = deployed.engine.record.model_copy(update={"version": "0" * 64, "created_at": 0.0})
    store.put_engine(record)  # a version whose pool was never applied: no sandbox ever binds
    eng = deployed.get_engine(version="0" * 12, claim_timeout=3.0)
    try:
        session = eng.start_session()
        result = await session.run("just answer", secrets=deployed.secrets(MY_TOKEN=CANARY))
        assert result.is_error
        assert CANARY not in (result.error or "")
        assert eng.pool in (result.error or "") and "did not become Ready" in (result.error or "")
        assert session.history()[-1].result.is_error  # recorded; the session goes on
        assert _claims(deployed, session.session_id) == []
    finally:
        await eng.aclose()
        store.delete_engine("sbx", "0" * 64)


async def test_sandbox_killed_mid_turn(deployed: Deployed, engine: Any) -> None:
    session = engine.start_session()
    first = await session.run("write the file out.txt", secrets=deployed.secrets())
    assert not first.is_error, first.error
    run = session.send("take your time, then answer", secrets=deployed.secrets())
    async for event in run:
        if event.type == "tool_use":
            break
    claim = engine.claims.held(session.session_id)
    assert claim is not None
    deployed.controller.kill_sandbox(claim.sandbox)
    result = await asyncio.wait_for(run.wait(), 90)
    assert result.is_error
    assert claim.sandbox in (result.error or "") and "send again to resume" in (result.error or "")
    assert isinstance(run.events[-1], ResultEvent)
    assert [t.turn for t in session.history()] == [1, 2]
    assert session.events(2)[0].type == "user"  # what happened before the kill is kept
    again = session.send("now read the file back", secrets=deployed.secrets())
    third = await again
    assert not third.is_error, third.error
    assert "hello-from-turn-1" in _tool_outputs(again.events)  # resumed from the turn-1 snapshot
    assert session.record.turns == 3


async def test_secret_canary_never_leaks(deployed: Deployed, engine: Any) -> None:
    session = engine.start_session()
    run = session.run("print the token", secrets=deployed.secrets(MY_TOKEN=CANARY))
    result = await run
    assert not result.is_error, result.error
    assert "token is" in _tool_outputs(run.events)
    assert CANARY not in json.dumps([e.model_dump(mode="json") for e in run.events])
    assert CANARY not in result.model_dump_json()
    # the manifests, the cluster's objects, every stored object
    from harness_run.runtime.sandbox._kube import Kube

    kube = Kube(deployed.cluster.api_client(), "default")
    for kind in (k8s.SANDBOX_TEMPLATE, k8s.SANDBOX_WARM_POOL, k8s.SANDBOX_CLAIM, k8s.SANDBOX):
        assert CANARY not in json.dumps(kube.list(kind))
    from google.cloud import storage

    bucket = deployed.store_url.removeprefix("gs://").split("/")[0]
    client = storage.Client(project="test")
    for blob in client.list_blobs(bucket):
        data = blob.download_as_bytes()
        assert CANARY.encode() not in data, blob.name
