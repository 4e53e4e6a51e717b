"""``harness-run serve``: the team server, an HTTP + SSE API over the library's own Engine/Session/Run.

aiohttp (the in-image worker's framework too) is imported with this package: import it only to serve.
The wire models and the client live in :mod:`harness_run.runtime.server_client`.
"""

from harness_run.server._access import grants
from harness_run.server._app import ROUTES, make_app
from harness_run.server._cloudrun import ServiceSettings, run_client, service_body
from harness_run.server._deploy import ServerDeployment, default_service_account, deploy_server
from harness_run.server._keys import (
    SECRET_ENV,
    CachedKeys,
    KeyStore,
    check_key,
    create_key,
    key_store,
    list_keys,
    record_valid,
    revoke_key,
    server_secret,
)
from harness_run.server._openapi import openapi_document
from harness_run.server._policy import ServerPolicy
from harness_run.server._sandbox import SandboxAccess
from harness_run.server._serve import open_server_store, serve
from harness_run.server._spend import period_start, spent_by
from harness_run.server._state import AGENT_NICE, ServerState, WarmOptions

__all__ = [
    "AGENT_NICE",
    "ROUTES",
    "SECRET_ENV",
    "CachedKeys",
    "KeyStore",
    "SandboxAccess",
    "ServerDeployment",
    "ServerPolicy",
    "ServerState",
    "ServiceSettings",
    "WarmOptions",
    "check_key",
    "create_key",
    "default_service_account",
    "deploy_server",
    "grants",
    "key_store",
    "list_keys",
    "make_app",
    "open_server_store",
    "openapi_document",
    "period_start",
    "record_valid",
    "revoke_key",
    "run_client",
    "serve",
    "server_secret",
    "service_body",
    "spent_by",
]
