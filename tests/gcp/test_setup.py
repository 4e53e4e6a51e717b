"""``harness-run-gcp-setup`` against a stand-in ``gcloud``/``kubectl`` (tests/gcp/cloud_cli.py).

No GCP project is reachable from the test machines, so the cloud CLIs are played by a small script
that keeps the project's state in a file; the setup under test is the real console script, run as a
subprocess. What is asserted is what an operator sees: the audit, what gets created, idempotency,
failures that stop only the steps that depend on them.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from harness_run.errors import UsageError
from harness_run.gcp import SetupOptions, plan
from harness_run.gcp._server import server_role_manifest

CLI = Path(__file__).with_name("cloud_cli.py")


@pytest.fixture
def cloud(tmp_path: Path) -> dict[str, str]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("gcloud", "kubectl", "bash"):
        (bin_dir / tool).symlink_to(CLI)  # the stand-in acts on the name it was called by
    CLI.chmod(0o755)
    state = tmp_path / "state.json"
    state.write_text(json.dumps({"have": ["project"], "project": "my-project"}))
    home = tmp_path / "home"
    home.mkdir()
    return {
        **os.environ,
        "PATH": f"{bin_dir}:/usr/bin:/bin",
        "HR_CLOUD_STATE": str(state),
        "HOME": str(home),
    }


def _setup(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "harness_run.gcp", "--project", "my-project", *args],
        env=env,
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
        timeout=120,
        check=False,
    )


def _log(env: dict[str, str]) -> list[str]:
    path = Path(env["HR_CLOUD_STATE"] + ".log")
    return path.read_text().splitlines() if path.exists() else []


def _changes(lines: list[str]) -> list[str]:
    verbs = (
        " create", " enable", "add-iam-policy-binding", "remove-iam-policy-binding", "get-credentials",
        "install-agent-sandbox", "apply -f -",
    )  # fmt: skip
    return [line for line in lines if any(v in line for v in verbs) and "describe" not in line]


def test_plan_is_pure_and_names_every_resource() -> None:
    options = SetupOptions(project="my-project", location="europe-west4")
    assert plan(options) == plan(options)
    text = json.dumps([s.apply for s in plan(options)])
    for piece in (
        'repositories", "create", "harness-run',
        "gs://my-project-harness-run",
        "--workload-pool=my-project.svc.id.goog",
        "--sandbox=type=gvisor",
        "roles/aiplatform.user",
        "roles/storage.objectUser",
        "run.googleapis.com",
        'service-accounts", "create", "harness-run-server',
        "--member=serviceAccount:harness-run-server@my-project.iam.gserviceaccount.com",
        "roles/container.clusterViewer",
        "secretmanager.googleapis.com",
    ):
        assert piece in text
    grants = [a for step in plan(options) for a in step.apply if "add-iam-policy-binding" in a]
    assert not any("roles/container.developer" in " ".join(a) for a in grants)
    assert options.registry == "europe-west4-docker.pkg.dev/my-project/harness-run"


def test_the_servers_grants_are_least_privilege() -> None:
    """The server's grants, as a golden list: folders, not the bucket; a namespaced Role, not
    container.developer; each named secret, nothing more."""
    options = SetupOptions(
        project="my-project",
        engines=("alpha",),
        history_prefix="team",
        secrets=("ANTHROPIC_API_KEY=projects/my-project/secrets/anthropic:latest",),
    )
    server = "serviceAccount:harness-run-server@my-project.iam.gserviceaccount.com"
    by_key = {s.key: s for s in plan(options)}

    def bound(key: str) -> tuple[str, str]:
        (argv,) = by_key[key].apply
        return argv[4] if argv[1] == "storage" else argv[3], next(x for x in argv if x.startswith("--role="))

    assert bound("server-keys-iam") == (
        "gs://my-project-harness-run/team/keys/",
        "--role=roles/storage.objectUser",
    )
    assert bound("server-engines-iam") == (
        "gs://my-project-harness-run/team/engines/",
        "--role=roles/storage.objectViewer",
    )
    assert bound("server-history-iam-alpha") == (
        "gs://my-project-harness-run/team/history/alpha/",
        "--role=roles/storage.objectUser",
    )
    assert bound("server-cluster-iam") == ("my-project", "--role=roles/container.clusterViewer")
    assert bound("server-secret-anthropic") == ("anthropic", "--role=roles/secretmanager.secretAccessor")
    server_grants = [
        k
        for k, st in by_key.items()
        for a in st.apply
        if "add-iam-policy-binding" in a and any(server in x for x in a)
    ]
    assert sorted(server_grants) == sorted(
        ["server-keys-iam", "server-engines-iam", "server-history-iam-alpha", "server-cluster-iam",
         "server-secret-anthropic"]
    ), "nothing on the bucket, nothing project-wide but finding the cluster"  # fmt: skip
    role = json.loads(by_key["server-k8s-role"].stdin or "")
    rules = role["items"][0]["rules"]
    assert rules == [
        {"apiGroups": ["extensions.agents.x-k8s.io"], "resources": ["sandboxclaims"],
         "verbs": ["create", "delete", "get", "list", "patch", "watch"]},
        {"apiGroups": ["agents.x-k8s.io"], "resources": ["sandboxes"], "verbs": ["get"]},
    ]  # fmt: skip
    assert role["items"][1]["subjects"] == [
        {"apiGroup": "rbac.authorization.k8s.io", "kind": "User",
         "name": "harness-run-server@my-project.iam.gserviceaccount.com"}
    ]  # fmt: skip
    assert role["items"][0]["metadata"]["namespace"] == "default"
    with pytest.raises(UsageError, match="--secret ANTHROPIC_API_KEY=<not shown>: not a Secret Manager"):
        SetupOptions(project="my-project", secrets=("ANTHROPIC_API_KEY=sk-ant-123",))


@pytest.mark.parametrize(
    ("kwargs", "flag"),
    [
        ({"project": "Bad_Project"}, "--project"),
        ({"project": "my-project", "location": "mars"}, "--location"),
        ({"project": "my-project", "namespace": "Not OK"}, "--namespace"),
    ],
)
def test_bad_options_name_the_flag(kwargs: dict[str, str], flag: str) -> None:
    with pytest.raises(UsageError, match=flag):
        SetupOptions(**kwargs)


def test_bad_project_exits_2_without_traceback(cloud: dict[str, str]) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "harness_run.gcp", "--project", "Bad_Project"],
        env=cloud, capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert result.returncode == 2
    assert "--project 'Bad_Project' is not a GCP project id" in result.stderr
    assert "Traceback" not in result.stderr
    assert _log(cloud) == []


def test_dry_run_prints_the_plan_and_runs_nothing(cloud: dict[str, str]) -> None:
    result = _setup(cloud, "--dry-run")
    assert result.returncode == 0, result.stderr
    assert "[22/22]" in result.stdout
    assert "gcloud container clusters create harness-run" in result.stdout
    assert _log(cloud) == []


def test_fresh_project_is_set_up_once_then_left_alone(cloud: dict[str, str]) -> None:
    check = _setup(cloud, "--check")
    assert check.returncode == 1
    assert "21 of 22 steps missing" in check.stdout
    assert _changes(_log(cloud)) == [], "--check must not change anything"

    applied = _setup(cloud, "--yes")
    assert applied.returncode == 0, applied.stdout + applied.stderr
    assert "ready: sandbox.deploy(spec, project='my-project', location='us-central1')" in applied.stdout
    assert "add cluster='harness-run' to name the cluster" in applied.stdout
    changes = _changes(_log(cloud))
    assert any("clusters create harness-run" in c for c in changes)
    assert any("node-pools create agent-sandbox-pool" in c for c in changes)
    assert any("principalSet://" in c and "123456789" in c for c in changes), "project number filled in"
    server = "serviceAccount:harness-run-server@my-project.iam.gserviceaccount.com"
    assert any("service-accounts create harness-run-server" in c for c in changes)
    assert not any("buckets add-iam-policy-binding" in c and server in c for c in changes), "no bucket-wide"
    assert any("roles/container.clusterViewer" in c and server in c for c in changes)
    assert not any("roles/container.developer" in c for c in changes)
    assert any(
        "managed-folders add-iam-policy-binding gs://my-project-harness-run/keys/" in c for c in changes
    )
    assert "kubectl apply -f -" in changes
    assert "reaches no engine's sessions yet: run again with --engine NAME" in applied.stdout
    assert "harness-run serve deploy --project my-project --region us-central1" in applied.stdout

    before = len(_log(cloud))
    again = _setup(cloud, "--yes")
    assert again.returncode == 0
    assert "ready:" in again.stdout
    assert _changes(_log(cloud)[before:]) == [], "a second run must add nothing"
    assert _setup(cloud, "--check").returncode == 0


def test_a_failed_step_stops_only_what_depends_on_it(cloud: dict[str, str]) -> None:
    failing = {**cloud, "HR_CLOUD_FAIL": "clusters create"}
    result = _setup(failing, "--yes")
    assert result.returncode == 1
    assert "FAILED: `gcloud container clusters create" in result.stdout
    assert "simulated failure" in result.stdout
    assert "skip gVisor node pool" in result.stdout
    state = json.loads(Path(cloud["HR_CLOUD_STATE"]).read_text())
    assert "storage buckets/gs://my-project-harness-run" in state["have"], "independent steps still ran"
    assert _setup(cloud, "--yes").returncode == 0, "re-running after the fix completes the setup"


def test_without_a_terminal_it_asks_for_yes(cloud: dict[str, str]) -> None:
    result = _setup(cloud)
    assert result.returncode == 1
    assert "re-run with --yes" in result.stdout
    assert _changes(_log(cloud)) == []


def test_without_gcloud_it_says_what_to_install(cloud: dict[str, str], tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "sh").symlink_to("/bin/sh")
    result = _setup({**cloud, "PATH": str(empty)}, "--yes")
    assert result.returncode == 1
    assert "install the Google Cloud CLI" in result.stdout


def test_json_audit(cloud: dict[str, str]) -> None:
    result = _setup(cloud, "--check", "--json")
    line = next(x for x in result.stdout.splitlines() if x.startswith("["))
    audit = {a["step"]: a["outcome"] for a in json.loads(line)}
    assert audit["project"] == "done"
    assert audit["apis"] == "missing"
    assert audit["cluster"] == "blocked", "a step whose prerequisite is missing is not audited"


def test_the_server_cluster_role_is_audited_by_role_not_just_by_member(cloud: dict[str, str]) -> None:
    assert _setup(cloud, "--yes").returncode == 0
    state_path = Path(cloud["HR_CLOUD_STATE"])
    state = json.loads(state_path.read_text())
    server = "serviceAccount:harness-run-server@my-project.iam.gserviceaccount.com"
    # the account keeps another project role, but loses roles/container.clusterViewer
    state["project_bindings"] = [
        [role, member] for role, member in state["project_bindings"] if member != server
    ] + [["roles/viewer", server]]
    state_path.write_text(json.dumps(state))
    result = _setup(cloud, "--check", "--json")
    line = next(x for x in result.stdout.splitlines() if x.startswith("["))
    audit = {a["step"]: a["outcome"] for a in json.loads(line)}
    assert audit["server-cluster-iam"] == "missing"
    assert audit["server-account"] == audit["server-keys-iam"] == audit["vertex-iam"] == "done"
    assert result.returncode == 1


def _set_up_before(env: dict[str, str], *, old: bool = False) -> None:
    """The stand-in's state after a full `harness-run-gcp-setup --yes` (cheaper than running it);
    ``old``: as an earlier version left it (the server on the whole bucket and container.developer on
    the project; none of its folders, Role or clusterViewer)."""
    namespace = "principalSet://iam.googleapis.com/projects/123456789/locations/global/workloadIdentityPools/my-project.svc.id.goog/namespace/default"
    server = "serviceAccount:harness-run-server@my-project.iam.gserviceaccount.com"
    apis = next(s for s in plan(SetupOptions(project="my-project")) if s.key == "apis").expect or ""
    state: dict[str, Any] = {
        "have": [
            "agent-sandbox", "artifacts repositories/harness-run", "container clusters/harness-run",
            "container node-pools/agent-sandbox-pool", "credentials", "namespace/default", "project",
            f"service-account/{server.removeprefix('serviceAccount:')}", "storage buckets/gs://my-project-harness-run",
        ],
        "project": "my-project",
        "apis": apis.split("\n"),
        "members": [namespace],
        "bucket_bindings": [["roles/storage.objectUser", namespace]],
        "context": "gke_my-project_us-central1_harness-run",
        "project_members": [namespace, server],
        "project_bindings": [["roles/aiplatform.user", namespace], ["roles/container.clusterViewer", server]],
        "folders": {
            "gs://my-project-harness-run/keys/": [server], "gs://my-project-harness-run/engines/": [server],
        },
        "k8s": {
            f"{item['kind']}/default/harness-run-server": item
            for item in json.loads(server_role_manifest(
                namespace="default", email="harness-run-server@my-project.iam.gserviceaccount.com"
            ))["items"]
        },
    }  # fmt: skip
    if old:
        state["members"].append(server)
        state["bucket_bindings"].append(["roles/storage.objectUser", server])
        state["project_bindings"][1] = ["roles/container.developer", server]
        del state["folders"], state["k8s"]
    Path(env["HR_CLOUD_STATE"]).write_text(json.dumps(state))
    docker = Path(env["HOME"]) / ".docker" / "config.json"
    docker.parent.mkdir(parents=True, exist_ok=True)
    docker.write_text(json.dumps({"credHelpers": {"us-central1-docker.pkg.dev": "gcloud"}}))
    if not old:
        assert _setup(env, "--check").returncode == 0, "the seeded state is a finished setup"


def test_the_audit_flags_the_servers_old_broad_grants_and_the_fix_removes_them(cloud: dict[str, str]) -> None:
    _set_up_before(cloud, old=True)
    server = "serviceAccount:harness-run-server@my-project.iam.gserviceaccount.com"
    check = _setup(cloud, "--check")
    assert check.returncode == 1
    out = check.stdout
    assert (
        "TODO no bucket-wide objectUser for the server — old broad grant: roles/storage.objectUser on all of "
        in out
    )
    assert f"still there: roles/storage.objectUser,{server}" in out
    assert (
        "TODO no project-wide container.developer for the server — old broad grant: roles/container.developer"
        in out
    )
    assert (
        f"$ gcloud projects remove-iam-policy-binding my-project --member={server} "
        "--role=roles/container.developer --all" in out
    ), "the audit names the fix"
    assert "no bucket-wide objectAdmin for the server" in out and _changes(_log(cloud)) == []

    fixed = _setup(cloud, "--yes", "--engine", "alpha")
    assert fixed.returncode == 0, fixed.stdout
    state = json.loads(Path(cloud["HR_CLOUD_STATE"]).read_text())
    assert [server] == [m for _, m in state["project_bindings"] if m == server]
    assert ["roles/container.clusterViewer", server] in state["project_bindings"]
    assert not any(m == server for _, m in state["bucket_bindings"]), "nothing on the whole bucket"
    assert {url for url, bound in state["folders"].items() if server in bound} == {
        "gs://my-project-harness-run/keys/",
        "gs://my-project-harness-run/engines/",
        "gs://my-project-harness-run/history/alpha/",
    }
    assert (
        state["k8s"]["RoleBinding/default/harness-run-server"]["subjects"][0]["name"] == server.split(":")[1]
    )
    assert "the team server reaches the sessions of alpha" in fixed.stdout
    assert _setup(cloud, "--check", "--engine", "alpha").returncode == 0


def test_engines_history_is_isolated_by_managed_folders_and_the_bucket_wide_grant_goes(
    cloud: dict[str, str],
) -> None:
    _set_up_before(cloud)  # an earlier setup: the namespace's pods on the whole bucket
    namespace = "principalSet://iam.googleapis.com/projects/123456789/locations/global/workloadIdentityPools/my-project.svc.id.goog/namespace/default"
    state_path = Path(cloud["HR_CLOUD_STATE"])

    plan_only = _setup(
        cloud, "--engine", "alpha", "--engine", "beta", "--history-prefix", "team", "--dry-run"
    )
    assert plan_only.returncode == 0, plan_only.stderr
    assert (
        "gcloud storage managed-folders create gs://my-project-harness-run/team/history/alpha/"
        in plan_only.stdout
    )
    assert "buckets remove-iam-policy-binding gs://my-project-harness-run" in plan_only.stdout
    assert "sandboxes may write history" not in plan_only.stdout  # no bucket-wide grant in this plan

    check = _setup(cloud, "--engine", "alpha", "--engine", "beta", "--history-prefix", "team", "--check")
    assert check.returncode == 1
    assert f"still there: {namespace}" in check.stdout
    assert "11 of 28 steps missing" in check.stdout  # 5 for the pods, 6 for the server

    failing = {
        **cloud,
        "HR_CLOUD_FAIL": "managed-folders create gs://my-project-harness-run/team/history/alpha/",
    }
    result = _setup(failing, "--engine", "alpha", "--engine", "beta", "--history-prefix", "team", "--yes")
    assert result.returncode == 1
    assert (
        "FAILED: `gcloud storage managed-folders create gs://my-project-harness-run/team/history/alpha/"
        in result.stdout
    )
    assert "skip engine alpha's pods may write its history (an earlier step failed)" in result.stdout
    state = json.loads(state_path.read_text())
    beta = "principal://iam.googleapis.com/projects/123456789/locations/global/workloadIdentityPools/my-project.svc.id.goog/subject/ns/default/sa/beta-agent"
    server = "serviceAccount:harness-run-server@my-project.iam.gserviceaccount.com"
    assert state["folders"]["gs://my-project-harness-run/team/history/beta/"] == [
        beta,
        server,
    ]  # beta went on
    assert "gs://my-project-harness-run/team/history/alpha/" not in state["folders"]
    assert namespace not in state["members"]  # the bucket-wide grant is gone

    before = len(_log(cloud))
    fixed = _setup(cloud, "--engine", "alpha", "--engine", "beta", "--history-prefix", "team", "--yes")
    assert fixed.returncode == 0, fixed.stdout
    folders = json.loads(state_path.read_text())["folders"]
    assert folders["gs://my-project-harness-run/team/history/alpha/"] == [
        beta.replace("beta-agent", "alpha-agent"),
        server,
    ]
    assert [c for c in _changes(_log(cloud)[before:])] == [
        "gcloud storage managed-folders create gs://my-project-harness-run/team/history/alpha/ --project my-project",
        "gcloud storage managed-folders add-iam-policy-binding gs://my-project-harness-run/team/history/alpha/ "
        f"--project my-project --member={beta.replace('beta-agent', 'alpha-agent')} --role=roles/storage.objectUser",
        "gcloud storage managed-folders add-iam-policy-binding gs://my-project-harness-run/team/history/alpha/ "
        f"--project my-project --member={server} --role=roles/storage.objectUser",
    ]
    again = len(_log(cloud))
    assert (
        _setup(cloud, "--engine", "alpha", "--engine", "beta", "--history-prefix", "team", "--yes").returncode
        == 0
    )
    assert _changes(_log(cloud)[again:]) == [], "a second run must change nothing"


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--engine", "Bad_Name"], "--engine 'Bad_Name' is not an engine name"),
        (["--engine", "a", "--engine", "a"], "--engine names an engine twice"),
        (
            ["--engine", "a", "--history-prefix", "/team/"],
            "--history-prefix '/team/' must be the store URL's path",
        ),
    ],
)
def test_bad_engine_options_exit_2_naming_the_flag(cloud: dict[str, str], args: list[str], says: str) -> None:
    result = _setup(cloud, *args, "--dry-run")
    assert result.returncode == 2
    assert says in result.stderr and "Traceback" not in result.stderr
