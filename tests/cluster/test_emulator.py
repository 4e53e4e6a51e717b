"""The API emulator through the official kubernetes client: apply, validate, select, watch."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import pytest

from harness_run import AgentSpec
from harness_run.compiler import PodOptions, compile
from harness_run.vocab import k8s

from .conftest import G, V, claim, echo_template, warm_pool

kubernetes = pytest.importorskip("kubernetes")
ApiException = kubernetes.client.ApiException


def _spec(network: Any) -> AgentSpec:
    return AgentSpec.from_dict(
        {
            "name": "cluster-agent",
            "harness": "claude-code",
            "model": "claude-sonnet-4-6",
            "network": network,
            "resources": {"cpu": "1"},
        }
    )


def _apply(cluster: Any, obj: dict[str, Any]) -> dict[str, Any]:
    """Create one manifest with the client call a deployer would use; returns the stored object."""
    client = cluster.api_client()
    ns = obj["metadata"]["namespace"]
    if obj["kind"] == "ServiceAccount":
        created = kubernetes.client.CoreV1Api(client).create_namespaced_service_account(ns, obj)
        return client.sanitize_for_serialization(created)
    if obj["kind"] == "NetworkPolicy":
        created = kubernetes.client.NetworkingV1Api(client).create_namespaced_network_policy(ns, obj)
        return client.sanitize_for_serialization(created)
    group, version = obj["apiVersion"].split("/")
    plural = {
        k.kind: k.plural for k in (k8s.SANDBOX_TEMPLATE, k8s.SANDBOX_WARM_POOL, k8s.FQDN_NETWORK_POLICY)
    }
    return kubernetes.client.CustomObjectsApi(client).create_namespaced_custom_object(
        group, version, ns, plural[obj["kind"]], obj
    )


@pytest.mark.parametrize("network", ["open", "none", ["pypi.org", "*.github.com", "mcp.example.com:8443"]])
def test_every_compiled_manifest_applies_and_validates(cluster: Any, tmp_path: Path, network: Any) -> None:
    plan = compile(
        _spec(network),
        base_dir=tmp_path,
        pool_size=2,
        pods=PodOptions(
            env={"HARNESS_RUN_STORE": "gs://bucket/hr"},
            gcp_service_account="agent@project.iam.gserviceaccount.com",
        ),
    )
    kinds = []
    for manifest in plan.manifests:
        stored = _apply(cluster, manifest)
        meta = stored["metadata"]
        assert meta["uid"] and meta["resourceVersion"] and meta["creationTimestamp"]
        assert meta["name"] == manifest["metadata"]["name"]
        kinds.append(manifest["kind"])
        with pytest.raises(ApiException) as again:
            _apply(cluster, manifest)
        assert again.value.status == 409
    assert kinds[0] == "ServiceAccount" and kinds[-2:] == ["SandboxTemplate", "SandboxWarmPool"]
    assert cluster.warnings == []  # nothing pruned: every field is known to the schemas


def test_invalid_objects_are_rejected_naming_the_field(custom: Any) -> None:
    template = echo_template("img")
    template["spec"]["podTemplate"]["spec"]["containers"][0]["image"] = 5
    with pytest.raises(ApiException) as bad_type:
        custom.create_namespaced_custom_object(G, V, "default", "sandboxtemplates", template)
    assert bad_type.value.status == 422
    body = json.loads(bad_type.value.body)
    assert body["reason"] == "Invalid"
    assert [c["field"] for c in body["details"]["causes"]] == ["spec.podTemplate.spec.containers[0].image"]

    missing = claim("c1", "pool")
    del missing["spec"]["warmPoolRef"]
    with pytest.raises(ApiException) as required:
        custom.create_namespaced_custom_object(G, V, "default", "sandboxclaims", missing)
    assert required.value.status == 422
    assert "spec.warmPoolRef: Required value" in json.loads(required.value.body)["message"]

    unknown = claim("c2", "pool")
    unknown["spec"]["sandboxTemplateRef"] = {"name": "t"}  # v1alpha1's field, not v1beta1's
    with pytest.raises(ApiException) as strict:
        custom.create_namespaced_custom_object(G, V, "default", "sandboxclaims", unknown)
    assert strict.value.status == 400
    assert 'unknown field "spec.sandboxTemplateRef"' in json.loads(strict.value.body)["message"]

    bad_label = warm_pool("p", "t", 1)
    bad_label["metadata"]["labels"] = {"ok": "not ok!"}
    with pytest.raises(ApiException) as label:
        custom.create_namespaced_custom_object(G, V, "default", "sandboxwarmpools", bad_label)
    assert label.value.status == 422
    assert "metadata.labels[ok]" in json.loads(label.value.body)["message"]

    custom.create_namespaced_custom_object(G, V, "default", "sandboxwarmpools", warm_pool("p", "t", 1))
    with pytest.raises(ApiException) as patched:  # patches are validated too
        custom.patch_namespaced_custom_object(
            G, V, "default", "sandboxwarmpools", "p", {"spec": {"replicas": -1}}
        )
    assert patched.value.status == 422
    assert "spec.replicas" in json.loads(patched.value.body)["message"]


def test_metadata_generation_status_and_conflicts(custom: Any) -> None:
    body = {**warm_pool("p", "t", 1), "status": {"replicas": 7}}
    del body["spec"]["replicas"]
    created = custom.create_namespaced_custom_object(G, V, "default", "sandboxwarmpools", body)
    meta = created["metadata"]
    assert meta["generation"] == 1 and meta["namespace"] == "default"
    assert created["spec"]["replicas"] == 1  # the schema's default
    assert "status" not in created  # status subresource: create ignores it

    patched = custom.patch_namespaced_custom_object(
        G, V, "default", "sandboxwarmpools", "p", {"spec": {"replicas": 3}, "status": {"replicas": 9}}
    )
    assert patched["metadata"]["generation"] == 2
    assert int(patched["metadata"]["resourceVersion"]) > int(meta["resourceVersion"])
    assert "status" not in patched  # the main endpoint ignores status
    status = custom.patch_namespaced_custom_object_status(
        G, V, "default", "sandboxwarmpools", "p", {"status": {"replicas": 2}, "spec": {"replicas": 5}}
    )
    assert status["status"] == {"replicas": 2}
    assert status["spec"]["replicas"] == 3 and status["metadata"]["generation"] == 2
    same = custom.patch_namespaced_custom_object(
        G, V, "default", "sandboxwarmpools", "p", {"spec": {"replicas": 3}}
    )
    assert same["metadata"]["resourceVersion"] == status["metadata"]["resourceVersion"]  # no-op

    stale = {"metadata": {"resourceVersion": meta["resourceVersion"]}, "spec": {"replicas": 4}}
    with pytest.raises(ApiException) as conflict:
        custom.patch_namespaced_custom_object(G, V, "default", "sandboxwarmpools", "p", stale)
    assert conflict.value.status == 409

    replaced = custom.replace_namespaced_custom_object(
        G, V, "default", "sandboxwarmpools", "p", {**warm_pool("p", "t2", 1), "metadata": same["metadata"]}
    )
    assert replaced["spec"]["sandboxTemplateRef"] == {"name": "t2"}

    for call in (
        lambda: custom.get_namespaced_custom_object(G, V, "default", "sandboxwarmpools", "nope"),
        lambda: custom.delete_namespaced_custom_object(G, V, "default", "sandboxwarmpools", "nope"),
        lambda: custom.patch_namespaced_custom_object(G, V, "default", "sandboxwarmpools", "nope", {}),
    ):
        with pytest.raises(ApiException) as missing:
            call()
        assert missing.value.status == 404

    custom.delete_namespaced_custom_object(G, V, "default", "sandboxwarmpools", "p")
    assert custom.list_namespaced_custom_object(G, V, "default", "sandboxwarmpools")["items"] == []


def test_patch_content_types(cluster: Any, custom: Any) -> None:
    core = kubernetes.client.CoreV1Api(cluster.api_client())
    core.create_namespaced_service_account("default", {"metadata": {"name": "sa"}})
    # the client sends dict bodies of core kinds as strategic merge patches (merged here like a merge patch)
    merged = core.patch_namespaced_service_account("sa", "default", {"metadata": {"labels": {"a": "b"}}})
    assert merged.metadata.labels == {"a": "b"}
    ops = [{"op": "add", "path": "/metadata/labels/c", "value": "d"}]
    assert core.patch_namespaced_service_account("sa", "default", ops).metadata.labels == {"a": "b", "c": "d"}
    with pytest.raises(ApiException) as invalid:
        core.patch_namespaced_service_account("sa", "default", {"automountServiceAccountToken": "yes"})
    assert invalid.value.status == 422
    assert "automountServiceAccountToken" in json.loads(invalid.value.body)["message"]

    custom.create_namespaced_custom_object(G, V, "default", "sandboxwarmpools", warm_pool("p", "t", 1))
    with pytest.raises(ApiException) as strategic:  # custom resources take no strategic merge patch
        custom.patch_namespaced_custom_object(
            G, V, "default", "sandboxwarmpools", "p", {"spec": {"replicas": 2}},
            _content_type="application/strategic-merge-patch+json",
        )  # fmt: skip
    assert strategic.value.status == 415
    ops = [{"op": "replace", "path": "/spec/replicas", "value": 2}]
    patched = custom.patch_namespaced_custom_object(
        G, V, "default", "sandboxwarmpools", "p", ops, _content_type="application/json-patch+json"
    )
    assert patched["spec"]["replicas"] == 2


def test_server_side_apply_creates_then_merges(custom: Any) -> None:
    def apply(body: dict[str, Any]) -> dict[str, Any]:
        return custom.patch_namespaced_custom_object(
            G, V, "default", "sandboxwarmpools", "ssa", body,
            field_manager="harness-run", _content_type="application/apply-patch+yaml",
        )  # fmt: skip

    # a real server answers an applying create with 201, which this client's patch maps to None
    assert apply(warm_pool("ssa", "t", 1)) is None
    created = custom.get_namespaced_custom_object(G, V, "default", "sandboxwarmpools", "ssa")
    assert created["metadata"]["generation"] == 1
    updated = apply(warm_pool("ssa", "t", 3))
    assert updated["spec"]["replicas"] == 3 and updated["metadata"]["generation"] == 2
    assert updated["metadata"]["uid"] == created["metadata"]["uid"]


def test_warn_mode_prunes_unknown_fields_like_a_real_server(crds_dir: Path) -> None:
    from testkit.cluster import ClusterEmulator

    with ClusterEmulator(crds_dir=crds_dir, field_validation="Warn") as cluster:
        custom = kubernetes.client.CustomObjectsApi(cluster.api_client())
        body = warm_pool("p", "t", 1)
        body["spec"]["replica"] = 2  # a typo
        stored = custom.create_namespaced_custom_object(G, V, "default", "sandboxwarmpools", body)
        assert "replica" not in stored["spec"]
        assert cluster.warnings == ["spec.replica"]


def test_label_selectors_on_list(custom: Any) -> None:
    for name, labels in (("a", {"app": "x", "tier": "1"}), ("b", {"app": "x"}), ("c", {"app": "y"})):
        custom.create_namespaced_custom_object(
            G,
            V,
            "default",
            "sandboxwarmpools",
            {**warm_pool(name, "t", 0), "metadata": {"name": name, "labels": labels}},
        )

    def names(selector: str) -> list[str]:
        items = custom.list_namespaced_custom_object(
            G, V, "default", "sandboxwarmpools", label_selector=selector
        )
        return [o["metadata"]["name"] for o in items["items"]]

    assert names("app=x") == ["a", "b"]
    assert names("app!=x") == ["c"]
    assert names("app in (x,y),!tier") == ["b", "c"]
    assert names("tier") == ["a"]
    assert names("app notin (x)") == ["c"]
    all_ns = custom.list_cluster_custom_object(G, V, "sandboxwarmpools", label_selector="app=y")
    assert [o["metadata"]["name"] for o in all_ns["items"]] == ["c"]


def test_watch_with_a_label_selector_sees_only_matching_objects(custom: Any) -> None:
    events: list[tuple[str, str]] = []
    started = threading.Event()

    def watch() -> None:
        w = kubernetes.watch.Watch()
        started.set()
        for event in w.stream(
            custom.list_namespaced_custom_object, G, V, "default", "sandboxwarmpools",
            label_selector="team=blue", timeout_seconds=3,
        ):  # fmt: skip
            events.append((event["type"], event["object"]["metadata"]["name"]))
            if event["object"]["metadata"]["name"] == "done":
                w.stop()

    def pool(name: str, team: str) -> dict[str, Any]:
        return {**warm_pool(name, "t", 0), "metadata": {"name": name, "labels": {"team": team}}}

    custom.create_namespaced_custom_object(G, V, "default", "sandboxwarmpools", pool("before", "blue"))
    thread = threading.Thread(target=watch)
    thread.start()
    started.wait()
    custom.create_namespaced_custom_object(G, V, "default", "sandboxwarmpools", pool("red", "red"))
    custom.create_namespaced_custom_object(G, V, "default", "sandboxwarmpools", pool("blue", "blue"))
    relabel = {"metadata": {"labels": {"team": "blue"}}}
    custom.patch_namespaced_custom_object(G, V, "default", "sandboxwarmpools", "red", relabel)
    custom.patch_namespaced_custom_object(
        G, V, "default", "sandboxwarmpools", "blue", {"metadata": {"labels": {"team": "red"}}}
    )
    custom.delete_namespaced_custom_object(G, V, "default", "sandboxwarmpools", "before")
    custom.create_namespaced_custom_object(G, V, "default", "sandboxwarmpools", pool("done", "blue"))
    thread.join(timeout=10)
    assert events == [
        ("ADDED", "before"),
        ("ADDED", "blue"),
        ("ADDED", "red"),  # started matching
        ("DELETED", "blue"),  # stopped matching
        ("DELETED", "before"),
        ("ADDED", "done"),
    ]


def test_watch_resumes_from_a_resource_version(custom: Any) -> None:
    first = custom.create_namespaced_custom_object(
        G, V, "default", "sandboxwarmpools", warm_pool("one", "t", 0)
    )
    custom.create_namespaced_custom_object(G, V, "default", "sandboxwarmpools", warm_pool("two", "t", 0))
    w = kubernetes.watch.Watch()
    seen = [
        (e["type"], e["object"]["metadata"]["name"])
        for e in w.stream(
            custom.list_namespaced_custom_object, G, V, "default", "sandboxwarmpools",
            resource_version=first["metadata"]["resourceVersion"], timeout_seconds=1,
        )
    ]  # fmt: skip
    assert seen == [("ADDED", "two")]


def test_owner_references_are_garbage_collected(custom: Any) -> None:
    pool = custom.create_namespaced_custom_object(G, V, "default", "sandboxwarmpools", warm_pool("p", "t", 0))
    owner = {"apiVersion": f"{G}/{V}", "kind": "SandboxWarmPool", "name": "p", "uid": pool["metadata"]["uid"]}
    sandbox = {
        "apiVersion": k8s.SANDBOX.api_version,
        "kind": "Sandbox",
        "metadata": {"name": "s", "ownerReferences": [owner]},
        "spec": {"podTemplate": {"spec": {"containers": [{"name": "a", "image": "i"}]}}},
    }
    custom.create_namespaced_custom_object(k8s.SANDBOX.group, V, "default", "sandboxes", sandbox)
    custom.delete_namespaced_custom_object(G, V, "default", "sandboxwarmpools", "p")
    assert custom.list_namespaced_custom_object(k8s.SANDBOX.group, V, "default", "sandboxes")["items"] == []


def test_discovery_serves_the_dynamic_client(cluster: Any) -> None:
    from kubernetes.dynamic import DynamicClient

    dynamic = DynamicClient(cluster.api_client())
    pools = dynamic.resources.get(api_version=f"{G}/{V}", kind="SandboxWarmPool")
    pools.create(body=warm_pool("dyn", "t", 0), namespace="default")
    assert [p.metadata.name for p in pools.get(namespace="default").items] == ["dyn"]
    assert dynamic.resources.get(api_version="v1", kind="ServiceAccount").namespaced


def test_a_watch_from_a_compacted_resource_version_gets_410(
    custom: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from testkit.cluster import _apiserver

    monkeypatch.setattr(_apiserver, "_LOG_LIMIT", 10)
    first = custom.create_namespaced_custom_object(
        G, V, "default", "sandboxwarmpools", warm_pool("p0", "t", 0)
    )
    for i in range(1, 25):
        custom.create_namespaced_custom_object(
            G, V, "default", "sandboxwarmpools", warm_pool(f"p{i}", "t", 0)
        )
    w = kubernetes.watch.Watch()
    with pytest.raises(ApiException) as gone:
        for _ in w.stream(
            custom.list_namespaced_custom_object, G, V, "default", "sandboxwarmpools",
            resource_version=first["metadata"]["resourceVersion"], timeout_seconds=1,
        ):  # fmt: skip
            pass
    assert gone.value.status == 410
