"""The worker's settings (from its environment) and the bearer-token check."""

from __future__ import annotations

import hashlib
import hmac
import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness_run.errors import UsageError
from harness_run.runtime import AgentUser
from harness_run.store import HistoryStore
from harness_run.vocab.k8s import ANNOTATION_TOKEN_SHA256, PODINFO_DIR, WORKER_PORT

__all__ = ["WorkerSettings", "bearer_sha256", "open_history_store", "parse_annotations", "token_matches"]


@dataclass(frozen=True, slots=True)
class WorkerSettings:
    host: str
    port: int
    store_url: str
    workdir: Path
    spec_path: Path
    podinfo_dir: Path
    token_sha256: str | None
    digest: str | None
    image_root: Path | None = None
    """``$HARNESS_RUN_ROOT`` when set (inside the compiled image): staged skills, installed packages."""
    pool_after: float | None = None
    """``$HARNESS_RUN_POOL_AFTER``: seconds before an idle workspace is lent (``LocalEngine``)."""
    agent_user: AgentUser | None = None
    """The uid the agent's processes run as (``$HARNESS_RUN_AGENT_UID``, see ``_privileges``)."""
    unix_socket: str | None = None
    """``$HARNESS_RUN_WORKER_SOCKET``: serve on this unix socket instead of TCP (a container
    without network; the client connects through the bind-mounted file)."""
    egress_socket: str | None = None
    """``$HARNESS_RUN_EGRESS_SOCKET``: the host's egress proxy (a container without network)."""
    egress_token: str | None = None
    """``$HARNESS_RUN_EGRESS_TOKEN``: the worker's own pass through that proxy."""

    @classmethod
    def from_env(cls, env: Mapping[str, str], *, agent_user: AgentUser | None = None) -> WorkerSettings:
        store = env.get("HARNESS_RUN_STORE", "").strip()
        if not store:
            raise UsageError(
                "HARNESS_RUN_STORE is not set; set it to the history store's URL "
                "(gs://bucket/prefix, or a directory for a local SQLite store)"
            )
        raw_port = env.get("HARNESS_RUN_WORKER_PORT", "").strip() or str(WORKER_PORT)
        try:
            port = int(raw_port)
        except ValueError:
            port = -1
        if not 0 <= port <= 65535:
            raise UsageError(f"HARNESS_RUN_WORKER_PORT={raw_port!r} is not a TCP port; use e.g. 8787")
        home = env.get("HOME") or str(Path.home())
        root = env.get("HARNESS_RUN_ROOT", "/opt/harness-run")
        raw_pool = env.get("HARNESS_RUN_POOL_AFTER", "").strip()
        try:
            pool_after = float(raw_pool) if raw_pool else None
        except ValueError:
            pool_after = -1.0
        if pool_after is not None and not pool_after >= 0:
            raise UsageError(
                f"HARNESS_RUN_POOL_AFTER={raw_pool!r} is not a number of seconds >= 0; use e.g. 60"
            )
        token = env.get("HARNESS_RUN_WORKER_TOKEN_SHA256", "").strip().lower() or None
        if token is not None and (len(token) != 64 or any(c not in "0123456789abcdef" for c in token)):
            raise UsageError(
                "HARNESS_RUN_WORKER_TOKEN_SHA256 must be the 64 hex digits of sha256(token); "
                "compute it with hashlib.sha256(token.encode()).hexdigest()"
            )
        return cls(
            host=env.get("HARNESS_RUN_WORKER_HOST", "").strip() or "0.0.0.0",
            port=port,
            store_url=store,
            workdir=Path(env.get("HARNESS_RUN_WORKDIR", "").strip() or f"{home}/.harness-run"),
            spec_path=Path(env.get("HARNESS_RUN_SPEC", "").strip() or f"{root}/spec.json"),
            podinfo_dir=Path(env.get("HARNESS_RUN_PODINFO", "").strip() or PODINFO_DIR),
            token_sha256=token,
            digest=env.get("HARNESS_RUN_DIGEST", "").strip() or None,
            image_root=Path(env["HARNESS_RUN_ROOT"]) if env.get("HARNESS_RUN_ROOT") else None,
            pool_after=pool_after,
            agent_user=agent_user,
            unix_socket=env.get("HARNESS_RUN_WORKER_SOCKET", "").strip() or None,
            egress_socket=env.get("HARNESS_RUN_EGRESS_SOCKET", "").strip() or None,
            egress_token=env.get("HARNESS_RUN_EGRESS_TOKEN", "").strip() or None,
        )

    def expected_token_sha256(self) -> str | None:
        """The hash from the env, else the claim's pod annotation (read every time: the downward API
        updates the file when a warm pod gets claimed)."""
        if self.token_sha256:
            return self.token_sha256
        try:
            text = (self.podinfo_dir / "annotations").read_text()
        except OSError:
            return None
        value = parse_annotations(text).get(ANNOTATION_TOKEN_SHA256, "").strip().lower()
        return value or None


def parse_annotations(text: str) -> dict[str, str]:
    """A downward-API ``annotations`` file: one ``key="value"`` a line (Go-quoted values)."""
    out: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, raw = line.partition("=")
        if not sep or not key.strip():
            continue
        raw = raw.strip()
        value: Any = raw
        if raw.startswith('"'):
            try:
                value = json.loads(raw)
            except ValueError:
                value = raw.strip('"')
        out[key.strip()] = str(value)
    return out


def bearer_sha256(header: str | None) -> str | None:
    """The sha256 (hex) of the token of ``Authorization: Bearer <token>``; None for anything else."""
    scheme, _, token = (header or "").partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        return None
    return hashlib.sha256(token.strip().encode()).hexdigest()


def token_matches(header: str | None, expected_sha256: str | None) -> bool:
    """``Authorization: Bearer <token>`` whose sha256 is the expected hash (constant-time compare)."""
    digest = bearer_sha256(header)
    if not expected_sha256 or digest is None:
        return False
    return hmac.compare_digest(digest, expected_sha256)


def open_history_store(url: str, engine: str) -> HistoryStore:
    """The store named by ``HARNESS_RUN_STORE`` (``gs://bucket/prefix``, ``file://path`` or a path).

    On GCS it is confined to ``engine``'s folder: a request for anything outside it is refused
    before it is sent (the pod's identity reaches only that folder; see ``GcsStore``)."""
    from harness_run.store import open_store

    return open_store(url, engine=engine, confined=True)
