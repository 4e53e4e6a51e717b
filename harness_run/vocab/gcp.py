"""Google Cloud names shared by `harness-run-gcp-setup` (gcp/) and `harness-run serve deploy` (server/):
the defaults both use, the team server's service account, the history folders, secret references."""

from __future__ import annotations

import re
from typing import Final, NamedTuple

from harness_run.errors import UsageError

__all__ = [
    "DEFAULT_CLUSTER",
    "DEFAULT_LOCATION",
    "DEFAULT_REPOSITORY",
    "DEFAULT_SERVICE",
    "HISTORY_FOLDER",
    "SERVER_ACCOUNT",
    "SecretRef",
    "history_folder",
    "parse_secret",
    "server_account_email",
]

DEFAULT_LOCATION: Final = "us-central1"
"""The region `harness-run-gcp-setup` prepares everything in unless told otherwise."""

DEFAULT_CLUSTER: Final = "harness-run"
"""The GKE cluster `harness-run-gcp-setup` creates, and `serve deploy` reaches unless told otherwise."""

DEFAULT_REPOSITORY: Final = "harness-run"
"""The Artifact Registry repository images are pushed to."""

DEFAULT_SERVICE: Final = "harness-run"
"""The Cloud Run service `harness-run serve deploy` creates or updates."""

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


_SECRET = re.compile(
    r"projects/(?P<project>[a-z][a-z0-9-]{4,28}[a-z0-9]|[0-9]{1,20})/secrets/(?P<secret>[A-Za-z0-9_-]{1,255})"
    r"(?:/versions/(?P<version>[A-Za-z0-9_-]{1,63})|:(?P<short>[A-Za-z0-9_-]{1,63}))?"
)
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


class SecretRef(NamedTuple):
    """One environment variable taken from a Secret Manager secret version (``serve deploy --secret``)."""

    env: str
    project: str
    secret: str
    version: str

    @property
    def resource(self) -> str:
        """``projects/<project>/secrets/<secret>`` (what IAM grants are made on)."""
        return f"projects/{self.project}/secrets/{self.secret}"


def parse_secret(value: str, *, flag: str = "--secret") -> SecretRef:
    """``NAME=projects/P/secrets/S/versions/V``, ``NAME=projects/P/secrets/S:V`` or
    ``NAME=projects/P/secrets/S`` (version ``latest``) -> :class:`SecretRef`; anything else is a
    :class:`UsageError` naming the flag and the forms. The value is a reference, never a secret."""
    forms = f"use {flag} NAME=projects/PROJECT/secrets/SECRET:latest (or .../secrets/SECRET/versions/VERSION)"
    env, sep, ref = value.partition("=")
    if not sep or not _ENV_NAME.fullmatch(env):
        raise UsageError(f"{flag} {value.split('=', 1)[0]!r}: not NAME=SECRET-REFERENCE; {forms}")
    match = _SECRET.fullmatch(ref)
    if match is None:
        shown = ref if ref.startswith("projects/") and len(ref) <= 200 else "<not shown>"
        raise UsageError(
            f"{flag} {env}={shown}: not a Secret Manager secret version (a reference, never the secret's "
            f"value); {forms}"
        )
    version = match["version"] or match["short"] or "latest"
    return SecretRef(env, match["project"], match["secret"], version)
