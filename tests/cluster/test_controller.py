"""The test controller: real containers behind Sandboxes, warm pools, claims, faults, cleanup."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from harness_run import AgentSpec
from harness_run.compiler import PodOptions, compile
from harness_run.vocab import k8s

from .conftest import (
    G,
    V,
    claim,
    claim_until_ready,
    echo_template,
    ready,
    sandbox,
    wait_for,
    wait_pool_ready,
    warm_pool,
    worker_get,
    worker_json,
)

pytestmark = [pytest.mark.docker, pytest.mark.integration]

SB = k8s.SANDBOX


def _running(docker_client: Any, docker_labels: dict[str, str]) -> list[Any]:
    label = next(iter(docker_labels.items()))
    filters = {"label": f"{label[0]}={label[1]}", "status": "running"}
    return docker_client.containers.list(filters=filters, sparse=True)


def _setup_pool(custom: Any, base_image: str, replicas: int, pool: str = "pool") -> None:
    custom.create_namespaced_custom_object(G, V, "default", "sandboxtemplates", echo_template(base_image))
    custom.create_namespaced_custom_object(
        G, V, "default", "sandboxwarmpools", warm_pool(pool, "echo", replicas)
    )


def test_warm_pool_runs_one_ready_container_per_replica(
    custom: Any, controller: Any, base_image: str, docker_client: Any, docker_labels: dict[str, str]
) -> None:
    _setup_pool(custom, base_image, 2)
    pool = wait_pool_ready(custom, "pool", 2)
    assert pool["status"]["selector"] == "agents.x-k8s.io/warm-pool=pool"
    sandboxes = custom.list_namespaced_custom_object(SB.group, SB.version, "default", SB.plural)["items"]
    assert len(sandboxes) == 2
    ports = set()
    for sb in sandboxes:
        assert ready(sb) is True
        assert sb["status"]["podIPs"] == ["127.0.0.1"]
        assert sb["metadata"]["ownerReferences"][0]["uid"] == pool["metadata"]["uid"]
        env = worker_json(custom, sb["metadata"]["name"], "/env")
        assert env["HARNESS_RUN_WORKER_PORT"] == sb["metadata"]["annotations"][k8s.ANNOTATION_WORKER_PORT]
        assert env["FROM_TEMPLATE"] == "1" and env["ECHO_EXTRA"] == "yes"
        assert worker_get(custom, sb["metadata"]["name"], "/annotations") == b'from-template="yes"\n'
        ports.add(env["HARNESS_RUN_WORKER_PORT"])
    assert len(ports) == 2
    assert len(_running(docker_client, docker_labels)) == 2


def test_a_claim_binds_a_warm_sandbox_fast_and_the_pool_refills(
    custom: Any, controller: Any, base_image: str
) -> None:
    _setup_pool(custom, base_image, 2)
    wait_pool_ready(custom, "pool", 2)
    before = {
        s["metadata"]["name"]
        for s in custom.list_namespaced_custom_object(SB.group, V, "default", SB.plural)["items"]
    }

    token = {k8s.ANNOTATION_TOKEN_SHA256: "ab" * 32}
    elapsed, bound = claim_until_ready(custom, claim("c1", "pool", token))
    assert elapsed < 1.0, f"warm claim took {elapsed:.3f}s"
    name = bound["status"]["sandbox"]["name"]
    assert name in before
    assert bound["status"]["sandbox"]["podIPs"] == ["127.0.0.1"]
    # the token hash reached the pod's downward-API file before the claim said Ready
    annotations = worker_get(custom, name, "/annotations").decode()
    assert f'{k8s.ANNOTATION_TOKEN_SHA256}="{"ab" * 32}"' in annotations.splitlines()
    adopted = sandbox(custom, name)
    assert adopted["metadata"]["annotations"][k8s.ANNOTATION_TOKEN_SHA256] == "ab" * 32
    assert adopted["metadata"]["ownerReferences"][0]["kind"] == "SandboxClaim"
    assert "agents.x-k8s.io/warm-pool" not in adopted["metadata"]["labels"]

    wait_pool_ready(custom, "pool", 2)  # replenished: two unclaimed ready sandboxes again
    members = custom.list_namespaced_custom_object(
        SB.group, V, "default", SB.plural, label_selector="agents.x-k8s.io/warm-pool=pool"
    )["items"]
    assert name not in {m["metadata"]["name"] for m in members}


def test_a_claim_without_a_warm_sandbox_cold_starts_one(
    custom: Any, controller: Any, base_image: str
) -> None:
    _setup_pool(custom, base_image, 0)
    elapsed, bound = claim_until_ready(custom, claim("cold", "pool", {"k": "v"}))
    assert bound["status"]["sandbox"]["name"] == "cold"
    assert 'k="v"' in worker_get(custom, "cold", "/annotations").decode()
    assert elapsed < 30


def test_a_claim_on_a_missing_pool_says_so(custom: Any, controller: Any) -> None:
    custom.create_namespaced_custom_object(G, V, "default", "sandboxclaims", claim("lost", "no-such-pool"))

    def condition() -> dict[str, Any] | None:
        obj = custom.get_namespaced_custom_object(G, V, "default", "sandboxclaims", "lost")
        return next(iter((obj.get("status") or {}).get("conditions") or []), None)

    cond = wait_for(condition, 10, "the claim's Ready condition")
    assert cond["status"] == "False" and cond["reason"] == "WarmPoolNotFound"
    assert "no-such-pool" in cond["message"]


def test_deleting_a_claim_removes_its_sandbox_and_container(
    custom: Any, controller: Any, base_image: str, docker_client: Any, docker_labels: dict[str, str]
) -> None:
    _setup_pool(custom, base_image, 1)
    wait_pool_ready(custom, "pool", 1)
    _, bound = claim_until_ready(custom, claim("gone", "pool"))
    name = bound["status"]["sandbox"]["name"]
    container_id = controller.pod(name).container_id
    custom.delete_namespaced_custom_object(G, V, "default", "sandboxclaims", "gone")

    def removed() -> bool:
        names = {
            s["metadata"]["name"]
            for s in custom.list_namespaced_custom_object(SB.group, V, "default", SB.plural)["items"]
        }
        ids = {c.id for c in docker_client.containers.list(all=True, sparse=True)}
        return name not in names and container_id not in ids

    wait_for(removed, 30, "the claim's sandbox and container to go")


def test_kill_sandbox_turns_ready_false(custom: Any, controller: Any, base_image: str) -> None:
    _setup_pool(custom, base_image, 1)
    wait_pool_ready(custom, "pool", 1)
    _, bound = claim_until_ready(custom, claim("victim", "pool"))
    name = bound["status"]["sandbox"]["name"]
    controller.kill_sandbox(name)
    assert ready(sandbox(custom, name)) is False

    def claim_not_ready() -> dict[str, Any] | None:
        obj = custom.get_namespaced_custom_object(G, V, "default", "sandboxclaims", "victim")
        return obj if ready(obj) is False else None

    killed = wait_for(claim_not_ready, 10, "the claim to turn Ready=False")
    assert killed["status"]["conditions"][0]["reason"] == "SandboxNotReady"
    assert "kill" in killed["status"]["conditions"][0]["message"]


def test_stop_leaves_no_container(
    cluster: Any, custom: Any, base_image: str, docker_client: Any, docker_labels: dict[str, str]
) -> None:
    from testkit.cluster import SandboxController

    controller = SandboxController(cluster, docker_client, labels=docker_labels)
    try:
        _setup_pool(custom, base_image, 2)
        wait_pool_ready(custom, "pool", 2)
        claim_until_ready(custom, claim("c", "pool"))
        # refilled: 2 in the pool + the claimed one
        wait_for(lambda: len(_running(docker_client, docker_labels)) == 3, 30, "3 running containers")
    finally:
        controller.stop()
    label = next(iter(docker_labels.items()))
    assert (
        docker_client.containers.list(all=True, sparse=True, filters={"label": f"{label[0]}={label[1]}"})
        == []
    )


def test_a_compiled_template_runs_with_its_pod_settings(
    tmp_path: Path, custom: Any, cluster: Any, controller: Any, base_image: str
) -> None:
    """The compiler's real SandboxTemplate (root with six capabilities, limits, workspace
    volume, downward-API volume, probe on the named port) with the echo worker as its command."""
    spec = AgentSpec.from_dict({"name": "compiled", "harness": "claude-code", "model": "claude-sonnet-4-6"})
    plan = compile(spec, base_dir=tmp_path, pool_size=1, pods=PodOptions(runtime_class=None))
    manifests = {m["kind"]: copy.deepcopy(m) for m in plan.manifests}
    container = manifests["SandboxTemplate"]["spec"]["podTemplate"]["spec"]["containers"][0]
    container["image"] = base_image
    container["command"] = ["python3", "-c", json.loads(json.dumps(_echo()))]
    for kind in ("SandboxTemplate", "SandboxWarmPool"):
        plural = {"SandboxTemplate": "sandboxtemplates", "SandboxWarmPool": "sandboxwarmpools"}[kind]
        custom.create_namespaced_custom_object(G, V, "default", plural, manifests[kind])
    pool = manifests["SandboxWarmPool"]["metadata"]["name"]
    wait_pool_ready(custom, pool, 1)
    _, bound = claim_until_ready(custom, claim("compiled", pool, {k8s.ANNOTATION_TOKEN_SHA256: "cd" * 32}))
    name = bound["status"]["sandbox"]["name"]
    who = worker_json(custom, name, "/whoami")
    # the template starts the worker as root (with six capabilities, no escalation): the real worker
    # then becomes AGENT_UID itself and runs the agent as AGENT_RUN_UID (tests/security/test_agent_uid.py)
    assert who == {"uid": 0, "cwd": k8s.WORKSPACE, "workspace_writable": True}
    # host network: the template's NET_ADMIN/NET_RAW are withheld (bits 12, 13) and the worker told
    # the namespace is the host's, so it never changes the host's firewall
    assert worker_json(custom, name, "/caps") & (1 << 12 | 1 << 13) == 0
    assert worker_json(custom, name, "/env")[k8s.AGENT_NETNS_ENV] == "shared"
    assert f'{k8s.ANNOTATION_TOKEN_SHA256}="{"cd" * 32}"' in worker_get(custom, name, "/annotations").decode()


def _echo() -> str:
    from .conftest import ECHO_WORKER

    return ECHO_WORKER


def test_concurrent_claims_each_get_their_own_sandbox(custom: Any, controller: Any, base_image: str) -> None:
    _setup_pool(custom, base_image, 2)
    wait_pool_ready(custom, "pool", 2)
    names = [f"many-{i}" for i in range(4)]
    for name in names:  # all at once: two bind warm sandboxes, two wait for new ones
        custom.create_namespaced_custom_object(
            G, V, "default", "sandboxclaims", claim(name, "pool", {"who": name})
        )

    def all_ready() -> list[dict[str, Any]] | None:
        claims = [custom.get_namespaced_custom_object(G, V, "default", "sandboxclaims", n) for n in names]
        return claims if all(ready(c) for c in claims) else None

    claims = wait_for(all_ready, 60, "all four claims to be Ready")
    boxes = [c["status"]["sandbox"]["name"] for c in claims]
    assert len(set(boxes)) == 4
    for name, box in zip(names, boxes, strict=True):
        assert f'who="{name}"' in worker_get(custom, box, "/annotations").decode()


def test_deleting_a_pool_removes_its_unclaimed_sandboxes(
    custom: Any, controller: Any, base_image: str, docker_client: Any, docker_labels: dict[str, str]
) -> None:
    _setup_pool(custom, base_image, 2)
    wait_pool_ready(custom, "pool", 2)
    _, bound = claim_until_ready(custom, claim("keeper", "pool"))
    custom.delete_namespaced_custom_object(G, V, "default", "sandboxwarmpools", "pool")

    def only_the_claimed_one_left() -> bool:
        items = custom.list_namespaced_custom_object(SB.group, V, "default", SB.plural)["items"]
        return [s["metadata"]["name"] for s in items] == [bound["status"]["sandbox"]["name"]] and len(
            _running(docker_client, docker_labels)
        ) == 1

    wait_for(only_the_claimed_one_left, 30, "the pool's sandboxes and containers to go")


def test_a_container_that_exits_is_reported_not_ready_with_its_output(
    custom: Any, controller: Any, base_image: str
) -> None:
    template = echo_template(base_image, "broken")
    template["spec"]["podTemplate"]["spec"]["containers"][0]["command"] = [
        "python3", "-c", "import sys; print('worker cannot start: no store'); sys.exit(3)",
    ]  # fmt: skip
    custom.create_namespaced_custom_object(G, V, "default", "sandboxtemplates", template)
    custom.create_namespaced_custom_object(
        G, V, "default", "sandboxwarmpools", warm_pool("broken", "broken", 0)
    )
    custom.create_namespaced_custom_object(G, V, "default", "sandboxclaims", claim("doomed", "broken"))

    def failed() -> dict[str, Any] | None:
        obj = custom.get_namespaced_custom_object(G, V, "default", "sandboxclaims", "doomed")
        conditions = (obj.get("status") or {}).get("conditions") or []
        return conditions[0] if conditions and "code 3" in conditions[0]["message"] else None

    cond = wait_for(failed, 30, "the claim to report the exited container")
    assert cond["status"] == "False"
    assert "worker cannot start: no store" in cond["message"]
