"""Google Cloud names shared by `harness-run-gcp-setup` (gcp/) and `harness-run serve deploy` (server/)."""

from __future__ import annotations

from typing import Final

__all__ = ["HISTORY_FOLDER", "SERVER_ACCOUNT", "history_folder", "server_account_email"]

SERVER_ACCOUNT: Final = "harness-run-server"
"""The Google service account the team server runs as on Cloud Run."""


def server_account_email(project: str) -> str:
    """``harness-run-server@<project>.iam.gserviceaccount.com``."""
    return f"{SERVER_ACCOUNT}@{project}.iam.gserviceaccount.com"


HISTORY_FOLDER: Final = "history"
"""``<store prefix>/history/<engine>/``: one engine's sessions, turns, events and blobs — a managed
folder whose IAM policy names only that engine's Kubernetes service account."""


def history_folder(prefix: str, engine: str) -> str:
    """The object-name prefix of ``engine``'s history under a store's ``prefix`` (ends with '/')."""
    return "/".join(p for p in (prefix.strip("/"), HISTORY_FOLDER, engine) if p) + "/"
