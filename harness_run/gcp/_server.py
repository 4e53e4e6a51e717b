"""The team server's grants (``serve deploy`` runs it as ``harness-run-server@``): least privilege.

What the server does, and the narrowest grant for it:

- **API keys** (``<prefix>/keys/``: create, read, revoke): ``roles/storage.objectUser`` on that managed
  folder only.
- **Engine records** (``<prefix>/engines/``: read; ``sandbox.deploy`` writes them as the operator):
  ``roles/storage.objectViewer`` on that managed folder only.
- **Sessions of the engines it serves** (``<prefix>/history/<engine>/``, the folders ``--engine`` makes
  for history isolation): ``roles/storage.objectUser`` on each of those folders. Nothing on the bucket
  itself: an earlier setup's bucket-wide ``objectUser`` (or an ``objectAdmin``) is flagged and removed.
- **Sandbox claims**: a Kubernetes ``Role`` in the engines' namespace (``sandboxclaims``: create, get,
  list, watch, patch, delete; ``sandboxes``: get; see ``runtime/sandbox/_claims.py``) bound to the
  account, instead of ``roles/container.developer`` on the project (every namespace, every resource:
  pods, secrets, exec). To reach the cluster's API at all a Google identity needs
  ``container.clusters.get``; ``roles/container.clusterViewer`` is the smallest predefined role with it
  (GKE's documented pairing with RBAC), and it grants nothing inside the cluster by itself.
  An earlier setup's ``roles/container.developer`` is flagged and removed.
- **Model keys**: ``roles/secretmanager.secretAccessor`` on each ``--secret`` only.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from harness_run.gcp._step import Step
from harness_run.vocab import k8s
from harness_run.vocab.gcp import SERVER_ACCOUNT, SecretRef, history_folder

__all__ = ["OLD_BUCKET_ROLES", "server_role_manifest", "server_steps"]

OLD_BUCKET_ROLES = ("roles/storage.objectUser", "roles/storage.objectAdmin")
"""Bucket-wide roles earlier setups (or hand-made grants) gave the server: flagged and removed."""
_ROLE = SERVER_ACCOUNT
_BINDINGS = ("--flatten=bindings[].members", "--format=csv[no-heading](bindings.role,bindings.members)")


def server_role_manifest(*, namespace: str, email: str) -> str:
    """The namespaced ``Role`` and ``RoleBinding`` (a JSON ``List`` for ``kubectl apply -f -``): what
    the server needs to claim sandboxes, and no more. GKE names a Google identity by its email."""
    claims, sandboxes = k8s.SANDBOX_CLAIM, k8s.SANDBOX
    meta = {"name": _ROLE, "namespace": namespace, "labels": {k8s.LABEL_MANAGED_BY: k8s.MANAGED_BY}}
    items: list[dict[str, Any]] = [
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "Role",
            "metadata": meta,
            "rules": [
                {
                    "apiGroups": [claims.group],
                    "resources": [claims.plural],
                    "verbs": ["create", "delete", "get", "list", "patch", "watch"],
                },
                {"apiGroups": [sandboxes.group], "resources": [sandboxes.plural], "verbs": ["get"]},
            ],
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": meta,
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": _ROLE},
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": email}],
        },
    ]
    return json.dumps({"apiVersion": "v1", "kind": "List", "items": items}, indent=2)


def _folder_grant(key: str, folder: str, role: str, member: str, why: str, project: str) -> list[Step]:
    p = ("--project", project)
    return [
        Step(
            f"{key}-folder",
            f"managed folder {folder}",
            "a managed folder, so IAM can grant the server this folder only",
            ("gcloud", "storage", "managed-folders", "describe", folder, *p),
            (("gcloud", "storage", "managed-folders", "create", folder, *p),),
            needs=("bucket",),
        ),
        Step(
            f"{key}-iam",
            why,
            f"{role} on {folder} only, for {member.removeprefix('serviceAccount:')}",
            ("gcloud", "storage", "managed-folders", "get-iam-policy", folder, *p, "--format=json"),
            (
                (
                    "gcloud", "storage", "managed-folders", "add-iam-policy-binding", folder, *p,
                    f"--member={member}", f"--role={role}",
                ),
            ),
            expect=member,
            needs=(f"{key}-folder", "server-account"),
        ),
    ]  # fmt: skip


def server_steps(
    *,
    project: str,
    bucket: str,
    prefix: str,
    namespace: str,
    email: str,
    engines: Sequence[str],
    secrets: Sequence[SecretRef],
) -> list[Step]:
    """The server's grants, after its account exists (pure; ``history-folder-<engine>`` steps come
    from :func:`~harness_run.gcp._history.history_steps`)."""
    p = ("--project", project)
    url = f"gs://{bucket}"
    server = f"serviceAccount:{email}"
    base = "/".join(x for x in (prefix.strip("/"),) if x)
    under = f"{url}/{base}/" if base else f"{url}/"
    steps = [
        *_folder_grant(
            "server-keys", f"{under}keys/", "roles/storage.objectUser", server,
            "the server may keep its API keys", project,
        ),
        *_folder_grant(
            "server-engines", f"{under}engines/", "roles/storage.objectViewer", server,
            "the server may read engine records", project,
        ),
    ]  # fmt: skip
    for engine in engines:
        folder = f"{url}/{history_folder(prefix, engine)}"
        steps.append(
            Step(
                f"server-history-iam-{engine}",
                f"the server may keep engine {engine}'s sessions",
                f"roles/storage.objectUser on {folder} only, for {email}",
                ("gcloud", "storage", "managed-folders", "get-iam-policy", folder, *p, "--format=json"),
                (
                    (
                        "gcloud", "storage", "managed-folders", "add-iam-policy-binding", folder, *p,
                        f"--member={server}", "--role=roles/storage.objectUser",
                    ),
                ),
                expect=server,
                needs=(f"history-folder-{engine}", "server-account"),
            )
        )  # fmt: skip
    for role in OLD_BUCKET_ROLES:
        short = role.removeprefix("roles/storage.")
        steps.append(
            Step(
                f"server-bucket-{short.lower()}-closed",
                f"no bucket-wide {short} for the server",
                f"old broad grant: {role} on all of {url} (every engine's sessions) — the fix removes it; "
                "the server keeps only its folders",
                ("gcloud", "storage", "buckets", "get-iam-policy", url, *p, *_BINDINGS),
                (
                    (
                        "gcloud", "storage", "buckets", "remove-iam-policy-binding", url, *p,
                        f"--member={server}", f"--role={role}",
                    ),
                ),
                forbid=f"{role},{server}",
                needs=("bucket", "server-account"),
            )
        )  # fmt: skip
    project_role = ("gcloud", "projects", "get-iam-policy", project, "--flatten=bindings[].members")
    members = "--format=value(bindings.members)"
    steps += [
        Step(
            "server-cluster-iam",
            "the server may find the cluster",
            f"roles/container.clusterViewer in {project} for {email}: cluster credentials only; what it "
            "may do inside is the namespaced Role",
            (*project_role, "--filter=bindings.role:roles/container.clusterViewer", members),
            (
                (
                    "gcloud", "projects", "add-iam-policy-binding", project, f"--member={server}",
                    "--role=roles/container.clusterViewer", "--condition=None",
                ),
            ),
            expect=server,
            needs=("project", "server-account"),
        ),
        Step(
            "server-cluster-developer-closed",
            "no project-wide container.developer for the server",
            f"old broad grant: roles/container.developer on project {project} (every namespace: pods, "
            "secrets, exec) — the fix removes it; the namespaced Role is what claims sandboxes",
            (*project_role, "--filter=bindings.role:roles/container.developer", members),
            (
                (
                    "gcloud", "projects", "remove-iam-policy-binding", project, f"--member={server}",
                    "--role=roles/container.developer", "--all",
                ),
            ),
            forbid=server,
            needs=("project", "server-account"),
        ),
        Step(
            "server-k8s-role",
            f"the server may claim sandboxes in namespace {namespace}",
            f"Role and RoleBinding {_ROLE}: sandboxclaims (create, get, list, watch, patch, delete) and "
            f"sandboxes (get) in {namespace}, for {email}",
            ("kubectl", "get", "role,rolebinding", _ROLE, "-n", namespace, "-o", "json"),
            (("kubectl", "apply", "-f", "-"),),
            expect=f"{email}\n{k8s.SANDBOX_CLAIM.plural}",
            needs=("namespace", "agent-sandbox", "server-account"),
            stdin=server_role_manifest(namespace=namespace, email=email),
        ),
    ]  # fmt: skip
    for ref in secrets:
        steps.append(
            Step(
                f"server-secret-{ref.secret}",
                f"the server may read secret {ref.secret}",
                f"roles/secretmanager.secretAccessor on {ref.resource} only (for ${ref.env})",
                ("gcloud", "secrets", "get-iam-policy", ref.secret, "--project", ref.project, *_BINDINGS),
                (
                    (
                        "gcloud", "secrets", "add-iam-policy-binding", ref.secret, "--project", ref.project,
                        f"--member={server}", "--role=roles/secretmanager.secretAccessor",
                    ),
                ),
                expect=f"roles/secretmanager.secretAccessor,{server}",
                needs=("apis", "server-account"),
            )
        )  # fmt: skip
    return steps
