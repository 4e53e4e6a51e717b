"""Google Cloud names shared by `harness-run-gcp-setup` (gcp/) and `harness-run serve deploy` (server/)."""

from __future__ import annotations

from typing import Final

__all__ = ["SERVER_ACCOUNT", "server_account_email"]

SERVER_ACCOUNT: Final = "harness-run-server"
"""The Google service account the team server runs as on Cloud Run."""


def server_account_email(project: str) -> str:
    """``harness-run-server@<project>.iam.gserviceaccount.com``."""
    return f"{SERVER_ACCOUNT}@{project}.iam.gserviceaccount.com"
