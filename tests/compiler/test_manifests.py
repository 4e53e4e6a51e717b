"""Every emitted manifest validates: Agent Sandbox kinds against the CRDs' openAPIV3Schema (jsonschema),
core kinds with kubernetes-validate. Unknown fields are errors here (the API server would prune them)."""

from __future__ import annotations

import copy
from functools import cache
from pathlib import Path
from typing import Any

import pytest
import yaml

from harness_run.compiler import BuildPlan, PodOptions, compile
from harness_run.vocab import k8s

from .conftest import CRDS_DIR, representative_spec

jsonschema = pytest.importorskip("jsonschema")


def _strict(schema: Any) -> Any:
    """CRD schema -> JSON Schema: ``additionalProperties: false`` where the CRD lists properties
    (structural schemas prune unknown fields; for us that is a silent bug), x-kubernetes-* dropped."""
    if isinstance(schema, list):
        return [_strict(item) for item in schema]  # type: ignore[misc]
    if not isinstance(schema, dict):
        return schema
    out = {k: _strict(v) for k, v in schema.items() if not k.startswith("x-kubernetes-")}  # type: ignore[union-attr]
    if schema.get("x-kubernetes-int-or-string"):
        out.pop("type", None)
        out.setdefault("anyOf", [{"type": "integer"}, {"type": "string"}])
    if (
        "properties" in schema
        and "additionalProperties" not in schema
        and not schema.get("x-kubernetes-preserve-unknown-fields")
    ):
        out["additionalProperties"] = False
    return out


@cache
def _crd_validators() -> dict[tuple[str, str], Any]:
    if not CRDS_DIR.is_dir():
        pytest.skip(f"Agent Sandbox CRDs not found at {CRDS_DIR} (set HARNESS_RUN_CRDS_DIR)")
    validators: dict[tuple[str, str], Any] = {}
    for path in sorted(CRDS_DIR.glob("*.yaml")):
        crd = yaml.safe_load(path.read_text())
        group, kind = crd["spec"]["group"], crd["spec"]["names"]["kind"]
        for version in crd["spec"]["versions"]:
            schema = _strict(version["schema"]["openAPIV3Schema"])
            validators[(f"{group}/{version['name']}", kind)] = jsonschema.Draft7Validator(schema)
    return validators


def _validate(obj: dict[str, Any]) -> None:
    key = (obj["apiVersion"], obj["kind"])
    if obj["apiVersion"].endswith(".x-k8s.io/v1beta1"):
        errors = sorted(_crd_validators()[key].iter_errors(obj), key=lambda e: list(e.path))
        assert not errors, "\n".join(f"{list(e.path)}: {e.message}" for e in errors)
    elif obj["kind"] == k8s.FQDN_NETWORK_POLICY.kind:
        _check_fqdn_policy(obj)  # no public schema to validate against: check the documented shape
    else:
        kubernetes_validate = pytest.importorskip("kubernetes_validate")
        kubernetes_validate.validate(copy.deepcopy(obj), kubernetes_validate.latest_version(), strict=True)


def _check_fqdn_policy(obj: dict[str, Any]) -> None:
    assert obj["apiVersion"] == "networking.gke.io/v1alpha1"
    assert set(obj["spec"]) == {"podSelector", "egress"}
    for rule in obj["spec"]["egress"]:
        assert set(rule) == {"matches", "ports"}
        for match in rule["matches"]:
            assert len(match) == 1
            assert next(iter(match)) in {"name", "pattern"}
        for port in rule["ports"]:
            assert port["protocol"] == "TCP"
            assert 0 < port["port"] < 65536


def _plan(tmp_path: Path, **overrides: Any) -> BuildPlan:
    skill = tmp_path / "skills" / "triage"
    skill.mkdir(parents=True, exist_ok=True)
    (skill / "SKILL.md").write_text("x\n")
    params = {k: overrides.pop(k) for k in ("pool_size", "namespace") if k in overrides}
    pods = PodOptions(
        runtime_class=overrides.pop("runtime_class", "gvisor"),
        env=overrides.pop("pod_env", {}),
        gcp_service_account=overrides.pop("gcp_service_account", None),
    )
    return compile(representative_spec(**overrides), base_dir=tmp_path, pods=pods, **params)


@pytest.mark.parametrize(
    "network",
    ["open", "none", ["pypi.org", "*.github.com", "mcp.example.com:8443"]],
    ids=["open", "none", "allowlist"],
)
def test_manifests_validate(tmp_path: Path, network: Any) -> None:
    plan = _plan(tmp_path, network=network)
    for obj in plan.manifests:
        _validate(obj)
    kinds = [m["kind"] for m in plan.manifests]
    expected = [] if network == "open" else ["NetworkPolicy", "FQDNNetworkPolicy"]  # the worker's hosts
    assert kinds == ["ServiceAccount", *expected, "SandboxTemplate", "SandboxWarmPool"]
    template = next(m for m in plan.manifests if m["kind"] == "SandboxTemplate")
    assert template["spec"]["networkPolicyManagement"] == ("Managed" if network == "open" else "Unmanaged")


def test_template_and_pool(tmp_path: Path) -> None:
    plan = _plan(tmp_path, pool_size=3, namespace="agents")
    by_kind = {m["kind"]: m for m in plan.manifests}
    template, pool = by_kind["SandboxTemplate"], by_kind["SandboxWarmPool"]
    assert template["apiVersion"] == "extensions.agents.x-k8s.io/v1beta1"
    assert template["metadata"]["name"] == pool["metadata"]["name"] == f"golden-agent-{plan.short}"
    assert pool["spec"] == {"replicas": 3, "sandboxTemplateRef": {"name": template["metadata"]["name"]}}
    labels = template["metadata"]["labels"]
    assert labels == {
        "harness-run.dev/engine": "golden-agent",
        "harness-run.dev/version": plan.short,
        "app.kubernetes.io/managed-by": "harness-run",
    }
    assert all(m["metadata"]["namespace"] == "agents" for m in plan.manifests)
    pod = template["spec"]["podTemplate"]["spec"]
    assert pod["runtimeClassName"] == "gvisor"
    (container,) = pod["containers"]
    assert container["image"] == plan.image
    assert (
        container["resources"]["requests"]
        == container["resources"]["limits"]
        == {"cpu": "2", "memory": "4Gi", "ephemeral-storage": "10Gi"}
    )
    # no env but the agent's uid and its own network namespace: the worker starts as root with a few
    # capabilities, confines the agent's uid to loopback (NET_ADMIN, NET_RAW: dropped right after)
    # and runs the agent's processes as another uid, without any
    assert container["env"] == [
        {"name": "HARNESS_RUN_AGENT_UID", "value": str(k8s.AGENT_RUN_UID)},
        {"name": "HARNESS_RUN_AGENT_NETNS", "value": "own"},
    ]
    assert "envFrom" not in container
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert container["securityContext"] == {
        "allowPrivilegeEscalation": False,
        "capabilities": {
            "drop": ["ALL"],
            "add": ["CHOWN", "DAC_OVERRIDE", "FOWNER", "KILL", "SETGID", "SETUID", "NET_ADMIN", "NET_RAW"],
        },
        "runAsUser": 0,
        "runAsGroup": 0,
        "runAsNonRoot": False,
    }
    assert pod["volumes"][0] == {"name": "workspace", "emptyDir": {}}
    # the worker: its port, readiness on /healthz, the pod's annotations as a file (token hash)
    assert container["ports"] == [{"name": "worker", "containerPort": 8787, "protocol": "TCP"}]
    assert container["readinessProbe"]["httpGet"] == {"path": "/healthz", "port": 8787}
    assert pod["volumes"][1] == {
        "name": "podinfo",
        "downwardAPI": {
            "items": [{"path": "annotations", "fieldRef": {"fieldPath": "metadata.annotations"}}]
        },
    }
    assert {"name": "podinfo", "mountPath": "/etc/harness-run/podinfo", "readOnly": True} in container[
        "volumeMounts"
    ]
    assert (k8s.WORKER_PORT, k8s.PODINFO_DIR) == (8787, "/etc/harness-run/podinfo")
    assert k8s.ANNOTATION_TOKEN_SHA256 == "harness-run.dev/token-sha256"
    assert k8s.ANNOTATION_WORKER_PORT == "harness-run.dev/worker-port"
    assert (
        "runtimeClassName"
        not in _plan(tmp_path, runtime_class=None).manifests[-2]["spec"]["podTemplate"]["spec"]
    )


def test_long_names_fit(tmp_path: Path) -> None:
    plan = _plan(tmp_path, name="a" * 63, network="none")
    for obj in plan.manifests:
        assert len(obj["metadata"]["name"]) <= 63
        assert not obj["metadata"]["name"].endswith("-")
        _validate(obj)
    names = [m["metadata"]["name"] for m in plan.manifests]
    assert len(set(names[:2])) == 2  # service account and policy differ


def test_crds_define_what_we_emit() -> None:
    validators = _crd_validators()
    for kind in (k8s.SANDBOX, k8s.SANDBOX_TEMPLATE, k8s.SANDBOX_CLAIM, k8s.SANDBOX_WARM_POOL):
        assert (kind.api_version, kind.kind) in validators
    for path in CRDS_DIR.glob("*.yaml"):
        crd = yaml.safe_load(path.read_text())
        storage = [v["name"] for v in crd["spec"]["versions"] if v.get("storage")]
        assert storage == [k8s.AGENT_SANDBOX_VERSION]
        assert crd["spec"]["names"]["plural"] in {
            k.plural for k in (k8s.SANDBOX, k8s.SANDBOX_TEMPLATE, k8s.SANDBOX_CLAIM, k8s.SANDBOX_WARM_POOL)
        }


def test_a_typo_would_be_caught(tmp_path: Path) -> None:
    template = copy.deepcopy(_plan(tmp_path).manifests[-2])
    template["spec"]["podTemplate"]["spec"]["containers"][0]["resource"] = {}
    with pytest.raises(AssertionError, match="resource"):
        _validate(template)


def test_pod_env_and_workload_identity(tmp_path: Path) -> None:
    """Vertex AI without keys: the rendered pod env names the project/region (no secret) and the
    engine's ServiceAccount carries the Workload Identity annotation; both validate, neither moves
    the digest."""
    env = {
        "HARNESS_RUN_STORE": "gs://agents-history/prod",
        "HARNESS_RUN_VERTEX_PROJECT": "my-project",
        "HARNESS_RUN_VERTEX_REGION": "us-east5",
    }
    gsa = "agents@my-project.iam.gserviceaccount.com"
    plan = _plan(tmp_path, network="none", pod_env=env, gcp_service_account=gsa)
    for obj in plan.manifests:
        _validate(obj)
    by_kind = {m["kind"]: m for m in plan.manifests}
    (container,) = by_kind["SandboxTemplate"]["spec"]["podTemplate"]["spec"]["containers"]
    assert container["env"] == [
        *({"name": k, "value": v} for k, v in sorted(env.items())),
        {"name": "HARNESS_RUN_AGENT_UID", "value": str(k8s.AGENT_RUN_UID)},
        {"name": "HARNESS_RUN_AGENT_NETNS", "value": "own"},
    ]
    account = by_kind["ServiceAccount"]
    assert account["metadata"]["annotations"] == {"iam.gke.io/gcp-service-account": gsa}
    assert account["automountServiceAccountToken"] is False
    assert plan.digest == _plan(tmp_path, network="none").digest
    # egress closed for the agent, open for what the worker needs: the bucket, Vertex AI, the model
    # endpoints by name; the metadata server (Workload Identity) and DNS by address
    fqdn = by_kind["FQDNNetworkPolicy"]["spec"]["egress"]
    named = {m.get("name") for rule in fqdn for m in rule["matches"]}
    assert {
        "storage.googleapis.com",
        "aiplatform.googleapis.com",
        "us-east5-aiplatform.googleapis.com",
    } <= named
    assert {"api.anthropic.com", "api.openai.com"} <= named
    assert all(rule["ports"] == [{"protocol": "TCP", "port": 443}] for rule in fqdn)
    blocks = {
        (rule["to"][0]["ipBlock"]["cidr"], port["port"])
        for rule in by_kind["NetworkPolicy"]["spec"]["egress"]
        if "ipBlock" in rule["to"][0]
        for port in rule["ports"]
    }
    assert {("169.254.169.254/32", 80), ("169.254.169.252/32", 988), ("169.254.169.254/32", 53)} <= blocks
    plain = {m["kind"]: m for m in _plan(tmp_path).manifests}["ServiceAccount"]
    assert "annotations" not in plain["metadata"]
