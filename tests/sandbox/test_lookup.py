"""The sandbox runtime's parts that need no containers: lookup, versions, deletion, claim objects
(against the validating Kubernetes API emulator), worker addresses, light imports."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from harness_run import AgentSpec
from harness_run.compiler import ImageOptions, PodOptions, compile
from harness_run.errors import InfrastructureError, UsageError
from harness_run.runtime.sandbox._claims import ClaimPool, claim_ready, worker_address
from harness_run.runtime.sandbox._kube import Kube
from harness_run.store import EngineRecord, SqliteStore
from harness_run.vocab import k8s

SPEC = AgentSpec(name="lookup", harness="claude-code", model="claude-sonnet-4-6", network={"egress": "none"})


@pytest.fixture
def cluster() -> Iterator[Any]:
    from testkit.cluster import ClusterEmulator

    with ClusterEmulator() as emulator:
        yield emulator


def _record(version: str, created_at: float, runtime: str = "sandbox") -> EngineRecord:
    return EngineRecord(
        name="lookup", version=version, spec=SPEC.to_dict(), runtime=runtime, created_at=created_at
    )


def test_import_is_light() -> None:
    code = (
        "import sys, harness_run.sandbox\n"
        "heavy = [m for m in ('kubernetes', 'docker', 'aiohttp', 'google.cloud.storage') if m in sys.modules]\n"
        "print(heavy)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_get_engine_finds_sandbox_versions_only(tmp_path: Path, cluster: Any) -> None:
    from harness_run import sandbox

    store = SqliteStore(tmp_path)
    kwargs: dict[str, Any] = {
        "project": "p",
        "location": "l",
        "store": store,
        "cluster": sandbox.ClusterTarget(api_client=cluster.api_client()),
    }
    with pytest.raises(
        UsageError, match=r"no engine 'lookup' .*deploy it first with harness_run\.sandbox\.deploy"
    ):
        sandbox.get_engine("lookup", **kwargs)
    store.put_engine(_record("a" * 64, 1.0))
    store.put_engine(_record("b" * 64, 2.0))
    store.put_engine(_record("c" * 12, 3.0, runtime="local"))  # e.g. a local engine of that name
    engine = sandbox.get_engine("lookup", **kwargs)
    assert engine.version == "b" * 64
    assert engine.pool == engine.template == f"lookup-{'b' * 12}"
    assert sandbox.get_engine("lookup", version="aaaa", **kwargs).version == "a" * 64
    assert [v.version for v in engine.versions()] == ["a" * 64, "b" * 64]
    with pytest.raises(UsageError, match="version 'c' of engine 'lookup'"):
        sandbox.get_engine("lookup", version="c", **kwargs)


def test_a_sandbox_engine_is_an_engine_and_closes(tmp_path: Path, cluster: Any) -> None:
    from harness_run import Engine, sandbox

    store = SqliteStore(tmp_path)
    store.put_engine(_record("a" * 64, 1.0))
    kwargs: dict[str, Any] = {
        "project": "p",
        "location": "l",
        "store": store,
        "cluster": sandbox.ClusterTarget(api_client=cluster.api_client()),
    }
    with sandbox.get_engine("lookup", **kwargs) as engine:
        assert isinstance(engine, Engine)
        session = engine.start_session()
        assert [s.session_id for s in engine.list_sessions()] == [session.session_id]
    with pytest.raises(UsageError, match="engine 'lookup' is closed"):
        engine.get_session(session.session_id)
    assert [s.session_id for s in store.list_sessions("lookup")] == [
        session.session_id
    ]  # a given store stays open


def test_delete_version_removes_its_objects_and_record(tmp_path: Path, cluster: Any) -> None:
    from harness_run import sandbox

    kube = Kube(cluster.api_client(), "default")
    pods = PodOptions(runtime_class=None)
    plans = [compile(SPEC, pods=pods), compile(SPEC, pods=pods, image=ImageOptions(base_image="other:1"))]
    store = SqliteStore(tmp_path)
    for i, plan in enumerate(plans):
        for obj in plan.manifests:
            kube.apply(obj)
        store.put_engine(_record(plan.digest, float(i)))
    engine = sandbox.get_engine(
        "lookup",
        project="p",
        location="l",
        store=store,
        cluster=sandbox.ClusterTarget(api_client=cluster.api_client()),
    )
    engine.delete_version(plans[0].digest[:10])
    assert [v.version for v in engine.versions()] == [plans[1].digest]
    names = {
        k.kind: [o["metadata"]["name"] for o in kube.list(k)]
        for k in (k8s.SANDBOX_TEMPLATE, k8s.SANDBOX_WARM_POOL, k8s.NETWORK_POLICY, k8s.SERVICE_ACCOUNT)
    }
    short = plans[1].short
    assert names["SandboxTemplate"] == [f"lookup-{short}"]
    assert names["SandboxWarmPool"] == [f"lookup-{short}"]
    assert names["NetworkPolicy"] == [f"lookup-{short}-egress"]
    assert names["ServiceAccount"] == ["lookup-agent"]  # shared by the engine's versions
    with pytest.raises(UsageError, match="no version"):
        engine.delete_version(plans[0].digest)


async def test_claim_object_validates_and_times_out_naming_the_pool(cluster: Any) -> None:
    kube = Kube(cluster.api_client(), "default")
    pool = ClaimPool(
        kube, engine="lookup", short="0" * 12, pool="lookup-nopool", idle_ttl=0, claim_timeout=1.0
    )
    started = time.monotonic()
    with pytest.raises(
        InfrastructureError,
        match=r"claim lookup-nopool-\w+ on warm pool lookup-nopool .*did not become Ready within 1 s",
    ):
        await pool.acquire("3f1e0c2a-0000-4000-8000-000000000001")
    assert time.monotonic() - started < 10
    assert kube.list(k8s.SANDBOX_CLAIM) == []  # the failed claim was deleted
    assert cluster.warnings == []
    await asyncio.sleep(0)


def test_worker_address_from_claim_or_sandbox() -> None:
    claim = {"metadata": {"name": "c"}, "status": {"sandbox": {"name": "s", "podIPs": ["10.0.0.7"]}}}
    box = {
        "metadata": {"annotations": {k8s.ANNOTATION_WORKER_PORT: "40123"}},
        "status": {"podIPs": ["10.9.9.9"]},
    }
    assert worker_address(claim, None) == "http://10.0.0.7:8787"
    assert worker_address(claim, box) == "http://10.0.0.7:40123"
    bare = {"metadata": {"name": "c"}, "status": {"sandbox": {"name": "s"}}}
    assert worker_address(bare, box) == "http://10.9.9.9:40123"
    assert worker_address(bare, {"status": {"podIPs": ["fd00::5"]}}) == "http://[fd00::5]:8787"
    with pytest.raises(InfrastructureError, match="reports no pod IP"):
        worker_address(bare, None)
    ready = {"type": "Ready", "status": "True"}
    assert claim_ready({"status": {"conditions": [ready], "sandbox": {"name": "s"}}})
    assert not claim_ready({"status": {"conditions": [ready]}})
    assert not claim_ready(
        {"status": {"conditions": [{**ready, "status": "False"}], "sandbox": {"name": "s"}}}
    )
