"""History isolation per engine: a managed folder per engine whose IAM names only that engine's pods.

Why managed folders and not an IAM condition on the bucket: a condition on ``resource.name`` can
limit reads and writes to a prefix, but not ``storage.objects.list`` (a list request is made on the
bucket, so no object name is there to test) — an engine's pods could still list every session id
of every engine. A managed folder's IAM policy covers the objects under it, listing included, and
needs uniform bucket-level access, which the bucket step already turns on.

With ``--engine`` the namespace-wide grant on the whole bucket (the plain ``bucket-iam`` step) is
not made, and where an earlier run made it, it is removed: it would reach every engine's folder.
"""

from __future__ import annotations

from collections.abc import Sequence

from harness_run.gcp._step import Step
from harness_run.vocab.gcp import history_folder
from harness_run.vocab.k8s import agent_service_account

__all__ = ["engine_principal", "history_steps"]

_ROLE = "roles/storage.objectUser"


def engine_principal(project: str, project_number: str, namespace: str, engine: str) -> str:
    """The Workload Identity principal of one engine's Kubernetes service account (``<engine>-agent``)."""
    return (
        f"principal://iam.googleapis.com/projects/{project_number}/locations/global/workloadIdentityPools/"
        f"{project}.svc.id.goog/subject/ns/{namespace}/sa/{agent_service_account(engine)}"
    )


def history_steps(
    *,
    bucket: str,
    prefix: str,
    engines: Sequence[str],
    project: str,
    namespace: str,
    namespace_member: str,
) -> list[Step]:
    """No steps without engines (the bucket-wide grant stays); else: the bucket-wide grant closed,
    then per engine its managed folder and the folder's binding for that engine's service account."""
    if not engines:
        return []
    p = ("--project", project)
    url = f"gs://{bucket}"
    steps = [
        Step(
            "bucket-iam-closed",
            "no bucket-wide history access for pods",
            f"each engine's pods reach only their own folder, so the namespace's pods hold no role on {url} "
            "(an earlier run's grant is removed)",
            ("gcloud", "storage", "buckets", "get-iam-policy", url, *p, "--format=json"),
            (
                (
                    "gcloud", "storage", "buckets", "remove-iam-policy-binding", url, *p,
                    f"--member={namespace_member}", f"--role={_ROLE}",
                ),
            ),
            forbid=namespace_member,
            needs=("bucket", "project"),
        ),
    ]  # fmt: skip
    for engine in engines:
        folder = f"{url}/{history_folder(prefix, engine)}"
        member = engine_principal(project, "{project_number}", namespace, engine)
        steps += [
            Step(
                f"history-folder-{engine}",
                f"history folder of engine {engine}",
                f"{folder}: a managed folder, so IAM can grant that engine's pods this folder only",
                ("gcloud", "storage", "managed-folders", "describe", folder, *p),
                (("gcloud", "storage", "managed-folders", "create", folder, *p),),
                needs=("bucket",),
            ),
            Step(
                f"history-iam-{engine}",
                f"engine {engine}'s pods may write its history",
                f"{_ROLE} on {folder} for the service account {agent_service_account(engine)} in "
                f"namespace {namespace} (Workload Identity), and for nobody else's pods",
                ("gcloud", "storage", "managed-folders", "get-iam-policy", folder, *p, "--format=json"),
                (
                    (
                        "gcloud", "storage", "managed-folders", "add-iam-policy-binding", folder, *p,
                        f"--member={member}", f"--role={_ROLE}",
                    ),
                ),
                expect=member,
                needs=(f"history-folder-{engine}", "project"),
            ),
        ]  # fmt: skip
    return steps
