"""Which cluster a deploy or lookup reaches (no containers): kubeconfig files written here whose
contexts point at the Kubernetes API emulator; the context is chosen by ``cluster=`` and checked
against ``project``/``location``; lookups that only read history never touch a cluster; the pod env
names the Vertex AI region only when the spec does."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from harness_run import AgentSpec, sandbox
from harness_run.compiler import PodOptions, compile
from harness_run.errors import UsageError
from harness_run.runtime.sandbox._cluster import ENV_CLUSTER, GkeCluster, KubeContext, choose_context
from harness_run.runtime.sandbox._deploy import pod_env
from harness_run.runtime.sandbox._kube import Kube
from harness_run.store import EngineRecord, SqliteStore
from harness_run.vocab import k8s

from .conftest import write_kubeconfig

SPEC = AgentSpec(name="target", harness="claude-code", model="claude-sonnet-4-6", network={"egress": "none"})
PROJECT, LOCATION = "my-project", "us-central1"
HOME_CTX = f"gke_{PROJECT}_{LOCATION}_agents"
OTHER_CTX = "gke_other-project_europe-west1_prod"
CLOSED = "http://127.0.0.1:9"  # nothing listens there: a context that must not be used


@pytest.fixture
def cluster() -> Iterator[Any]:
    from testkit.cluster import ClusterEmulator

    with ClusterEmulator() as emulator:
        yield emulator


@pytest.fixture
def kube_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """No ambient cluster: an empty HOME, no KUBECONFIG, not in a pod, no HARNESS_RUN_CLUSTER."""
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    for name in ("KUBECONFIG", "KUBERNETES_SERVICE_HOST", ENV_CLUSTER):
        monkeypatch.delenv(name, raising=False)
    return home


def _store(tmp_path: Path) -> SqliteStore:
    store = SqliteStore(tmp_path / "store")
    store.put_engine(
        EngineRecord(name="target", version="a" * 64, spec=SPEC.to_dict(), runtime="sandbox", created_at=1.0)
    )
    return store


def _choose(current: str | None, *contexts: KubeContext | str, **kwargs: Any) -> str:
    items = [c if isinstance(c, KubeContext) else KubeContext(c, c) for c in contexts]
    kwargs.setdefault("name", None)
    kwargs.setdefault("context", None)
    chosen = choose_context(
        items,
        current,
        project=PROJECT,
        location=LOCATION,
        kubeconfig="/k/config",
        caller="sandbox.deploy()",
        **kwargs,
    )
    return chosen.name


# --- choosing and checking the context --------------------------------------------------------------


def test_gke_names() -> None:
    gke = GkeCluster.parse(HOME_CTX)
    assert gke == GkeCluster(PROJECT, LOCATION, "agents")
    assert gke.is_in(PROJECT, LOCATION)
    assert GkeCluster(PROJECT, "us-central1-b", "z").is_in(PROJECT, LOCATION)  # a zone of the region
    assert not GkeCluster(PROJECT, "us-central1", "z").is_in(PROJECT, "us-central")
    assert not GkeCluster(PROJECT, "us-east1", "z").is_in(PROJECT, LOCATION)
    assert not GkeCluster("other", LOCATION, "z").is_in(PROJECT, LOCATION)
    for text in ("kind-kind", "gke_a_b", "gke_a_b_c_d", "gke__b_c", "minikube"):
        assert GkeCluster.parse(text) is None


def test_the_current_context_is_checked_against_project_and_location() -> None:
    assert _choose(HOME_CTX, HOME_CTX, OTHER_CTX) == HOME_CTX
    assert _choose("gke_my-project_us-central1-a_zonal", "gke_my-project_us-central1-a_zonal")
    with pytest.raises(UsageError) as info:
        _choose(OTHER_CTX, HOME_CTX, OTHER_CTX)
    message = str(info.value)
    # both sides named: what the context reaches and what the call asked for
    assert (
        f"current kubeconfig context '{OTHER_CTX}' is GKE cluster 'prod' in project 'other-project'"
        in message
    )
    assert "location 'europe-west1'" in message
    assert "sandbox.deploy() was asked for project 'my-project', location 'us-central1'" in message
    # a context that names no GKE cluster cannot be checked: used as it is
    assert _choose("kind-dev", "kind-dev", HOME_CTX) == "kind-dev"
    with pytest.raises(UsageError, match="has no current context"):
        _choose(None, HOME_CTX)


def test_cluster_name_picks_its_context_not_the_current_one() -> None:
    assert _choose(OTHER_CTX, OTHER_CTX, HOME_CTX, name="agents") == HOME_CTX
    renamed = KubeContext("prod-agents", HOME_CTX)  # `kubectl config rename-context`: the cluster entry tells
    assert _choose(OTHER_CTX, OTHER_CTX, renamed, name="agents") == "prod-agents"
    with pytest.raises(UsageError) as info:
        _choose(HOME_CTX, HOME_CTX, OTHER_CTX, name="prod")
    message = str(info.value)
    assert "no context for GKE cluster 'prod' in project 'my-project', location 'us-central1'" in message
    assert (
        "gcloud container clusters get-credentials prod --location us-central1 --project my-project"
        in message
    )


def test_a_named_context_must_exist_and_match() -> None:
    assert _choose(OTHER_CTX, OTHER_CTX, HOME_CTX, context=HOME_CTX) == HOME_CTX
    assert _choose(None, "kind-dev", context="kind-dev") == "kind-dev"
    with pytest.raises(UsageError, match=r"has no context 'nope' \(contexts: gke_"):
        _choose(HOME_CTX, HOME_CTX, context="nope")
    with pytest.raises(
        UsageError, match="context 'gke_other-project_europe-west1_prod' is GKE cluster 'prod'"
    ):
        _choose(HOME_CTX, HOME_CTX, OTHER_CTX, context=OTHER_CTX)
    with pytest.raises(
        UsageError, match="asked for project 'my-project', location 'us-central1', cluster 'x'"
    ):
        _choose(HOME_CTX, HOME_CTX, context=HOME_CTX, name="x")
    with pytest.raises(UsageError, match="names no GKE cluster"):
        _choose(None, "kind-dev", context="kind-dev", name="agents")


def test_option_objects_are_checked() -> None:
    with pytest.raises(UsageError, match="not a GKE cluster name"):
        sandbox.ClusterTarget(name="Prod_1")
    with pytest.raises(UsageError, match="not a Kubernetes namespace name"):
        sandbox.ClusterTarget(namespace="Agents")
    with pytest.raises(UsageError, match=r"either api_client= .* or name="):
        sandbox.ClusterTarget(api_client=object(), name="agents")
    with pytest.raises(UsageError, match="idle_ttl"):
        sandbox.ClaimOptions(idle_ttl=-1)
    with pytest.raises(UsageError, match="claim_timeout"):
        sandbox.ClaimOptions(claim_timeout=0)
    with pytest.raises(UsageError, match=r"pool_after must be seconds >= 0"):
        sandbox.ClaimOptions(pool_after=float("nan"))
    with pytest.raises(UsageError, match="router_url"):
        sandbox.ClaimOptions(router_url="sandbox-router:8080")
    assert sandbox.ClusterTarget.of("agents") == sandbox.ClusterTarget(name="agents")
    assert sandbox.ClusterTarget.of(None) == sandbox.ClusterTarget()


# --- through real kubeconfig files and the emulator ------------------------------------------------


def test_deploy_to_a_context_of_another_project_fails_before_building(
    kube_env: Path, tmp_path: Path, cluster: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = write_kubeconfig(tmp_path / "config", cluster.url, [HOME_CTX, OTHER_CTX], current=OTHER_CTX)
    monkeypatch.setenv("KUBECONFIG", str(config))
    with pytest.raises(UsageError) as info:
        sandbox.deploy(
            SPEC, project=PROJECT, location=LOCATION, store=str(tmp_path / "store"), progress=False
        )
    message = str(info.value)
    assert f"'{OTHER_CTX}' is GKE cluster 'prod' in project 'other-project'" in message
    assert "project 'my-project', location 'us-central1'" in message
    assert Kube(cluster.api_client()).list(k8s.SERVICE_ACCOUNT) == []  # nothing was applied
    with pytest.raises(UsageError, match="no context for GKE cluster 'missing'"):
        sandbox.deploy(SPEC, project=PROJECT, location=LOCATION, cluster="missing", store=str(tmp_path / "s"))


def test_get_engine_uses_the_named_clusters_context(
    kube_env: Path, tmp_path: Path, cluster: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``cluster="agents"`` reaches the emulator through its GKE context although the current
    context is another cluster (which nothing answers)."""
    config = tmp_path / "config"
    write_kubeconfig(config, CLOSED, [OTHER_CTX], current=OTHER_CTX)
    merged = write_kubeconfig(tmp_path / "agents", cluster.url, [HOME_CTX])
    monkeypatch.setenv("KUBECONFIG", os.pathsep.join([str(config), str(merged)]))  # kubectl merges both
    store = _store(tmp_path)
    plan = compile(SPEC, pods=PodOptions(runtime_class=None))
    engine = sandbox.get_engine("target", project=PROJECT, location=LOCATION, cluster="agents", store=store)
    assert not engine.kube.connected
    for obj in plan.manifests:
        engine.kube.apply(obj)
    assert engine.kube.server == cluster.url
    names = [o["metadata"]["name"] for o in engine.kube.list(k8s.SANDBOX_TEMPLATE)]
    assert names == [f"target-{plan.short}"]
    monkeypatch.setenv(ENV_CLUSTER, "agents")  # the same from the environment (CI)
    again = sandbox.get_engine("target", project=PROJECT, location=LOCATION, store=store)
    assert again.kube.list(k8s.SANDBOX_TEMPLATE) != []


def test_get_engine_checks_the_context_when_it_first_needs_the_cluster(
    kube_env: Path, tmp_path: Path, cluster: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = write_kubeconfig(tmp_path / "c", cluster.url, [OTHER_CTX], current=OTHER_CTX)
    monkeypatch.setenv("KUBECONFIG", str(config))
    engine = sandbox.get_engine("target", project=PROJECT, location=LOCATION, store=_store(tmp_path))
    assert [v.version for v in engine.versions()] == ["a" * 64]  # history only: fine
    with pytest.raises(UsageError, match=r"sandbox\.get_engine\(\) was asked for project 'my-project'"):
        engine.delete_version("aaaa")
    assert [v.version for v in engine.versions()] == ["a" * 64]  # nothing deleted


def test_a_context_by_name_from_an_explicit_kubeconfig(kube_env: Path, tmp_path: Path, cluster: Any) -> None:
    config = write_kubeconfig(tmp_path / "c", cluster.url, ["kind-dev"])  # no current context at all
    target = sandbox.ClusterTarget(context="kind-dev", kubeconfig=config, namespace="agents")
    engine = sandbox.get_engine(
        "target", project=PROJECT, location=LOCATION, cluster=target, store=_store(tmp_path)
    )
    assert engine.namespace == "agents"
    assert engine.kube.list(k8s.SANDBOX_TEMPLATE) == []
    assert engine.kube.server == cluster.url


# --- lookups without a cluster -------------------------------------------------------------------------


def test_history_lookups_need_no_kubeconfig(tmp_path: Path) -> None:
    """``get_engine`` + ``versions()``, ``list_sessions()`` and ``get_session(id).history()`` with no
    KUBECONFIG and an empty HOME: the store answers, the kubernetes client is never imported."""
    store_dir = tmp_path / "store"
    _store(store_dir.parent)  # writes tmp_path/store
    home = tmp_path / "empty-home"
    home.mkdir()
    env = {
        k: v for k, v in os.environ.items() if k not in ("KUBECONFIG", "KUBERNETES_SERVICE_HOST", ENV_CLUSTER)
    }
    env["HOME"] = str(home)
    code = (
        "import json, sys\n"
        "from harness_run import sandbox\n"
        f"engine = sandbox.get_engine('target', project='p', location='us-central1', store={str(store_dir)!r})\n"
        "session = engine.start_session()\n"
        "again = engine.get_session(session.session_id)\n"
        "print(json.dumps({'versions': [v.version[:4] for v in engine.versions()],\n"
        "    'sessions': [s.session_id for s in engine.list_sessions()], 'id': session.session_id,\n"
        "    'history': len(again.history()), 'connected': engine.kube.connected,\n"
        "    'kubernetes': 'kubernetes' in sys.modules}))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 0, out.stderr[-3000:]
    seen = json.loads(out.stdout.strip().splitlines()[-1])
    assert seen["versions"] == ["aaaa"]
    assert seen["sessions"] == [seen["id"]]
    assert seen["history"] == 0
    assert seen["connected"] is False
    assert seen["kubernetes"] is False


async def test_a_turn_without_a_kubeconfig_says_how_to_get_one(kube_env: Path, tmp_path: Path) -> None:
    engine = sandbox.get_engine("target", project=PROJECT, location=LOCATION, store=_store(tmp_path))
    session = engine.start_session()
    result = await session.run("hello")
    assert result.is_error
    assert "no kubeconfig at ~/.kube/config" in str(result.error)
    assert "gcloud container clusters get-credentials" in str(result.error)
    await engine.aclose()


# --- the Vertex AI region -------------------------------------------------------------------------------


def test_the_pod_env_names_a_vertex_region_only_when_the_spec_does() -> None:
    plain = pod_env(SPEC, PodOptions(), store_url="gs://b/hr", project=PROJECT)
    assert plain == {
        "HARNESS_RUN_POOL_AFTER": "0",  # the client decides when a workspace is lent
        "HARNESS_RUN_STORE": "gs://b/hr",
        "HARNESS_RUN_VERTEX_PROJECT": PROJECT,
    }
    regional = AgentSpec.from_dict({**SPEC.to_dict(), "env": {"CLOUD_ML_REGION": "us-east5"}})
    env = pod_env(regional, PodOptions(env={"LOG_LEVEL": "debug"}), store_url="gs://b/hr", project=PROJECT)
    assert env["HARNESS_RUN_VERTEX_REGION"] == "us-east5"
    assert env["LOG_LEVEL"] == "debug"
    for name in ("HARNESS_RUN_STORE", "HARNESS_RUN_VERTEX_PROJECT", "HARNESS_RUN_VERTEX_REGION"):
        with pytest.raises(UsageError, match=f"must not set {name}"):
            pod_env(SPEC, PodOptions(env={name: "x"}), store_url="gs://b/hr", project=PROJECT)
    # rendered into the SandboxTemplate as deploy compiles it
    for spec, expected in ((SPEC, None), (regional, "us-east5")):
        pods = PodOptions(env=pod_env(spec, PodOptions(), store_url="gs://b/hr", project=PROJECT))
        template = next(m for m in compile(spec, pods=pods).manifests if m["kind"] == "SandboxTemplate")
        (container,) = template["spec"]["podTemplate"]["spec"]["containers"]
        rendered = {e["name"]: e["value"] for e in container["env"]}
        assert rendered.get("HARNESS_RUN_VERTEX_REGION") == expected
        assert rendered["HARNESS_RUN_VERTEX_PROJECT"] == PROJECT
