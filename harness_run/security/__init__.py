"""Credentials and the agent's environment: per-run secrets, their routing to one consumer each,
redaction of every form of a secret value, and the allow-listed environment a harness runs in.

Every runtime applies this layer the same way (the local engine and the in-image worker)."""

from harness_run.security._approvals import QUESTIONS_OFF, ApprovalDesk, ApprovalSink, wake
from harness_run.security._egress import (
    AGENT_PROXY_ENV,
    NO_PROXY,
    EgressProxy,
    LoopbackRelay,
    host_allowed,
    proxy_env,
)
from harness_run.security._files import redact_tree
from harness_run.security._git_broker import GitBroker
from harness_run.security._guard_broker import GuardBroker
from harness_run.security._mcp_broker import McpBroker
from harness_run.security._proxy import PROXY_ENV, ModelProxy, inline_google_credentials, proxy_enabled
from harness_run.security._secrets import (
    OPENROUTER_URL,
    SHORT_SECRET,
    agent_env,
    check_secrets,
    exposed_secrets,
    git_auth_env,
    redact_event,
    redact_text,
    resolve_secrets,
    routed_secret_names,
    secret_forms,
    secret_values,
)
from harness_run.security._stream import DeltaRedactor, EventRedactor
from harness_run.security._turn import TurnCredentials

__all__ = [
    "AGENT_PROXY_ENV",
    "NO_PROXY",
    "OPENROUTER_URL",
    "PROXY_ENV",
    "QUESTIONS_OFF",
    "SHORT_SECRET",
    "ApprovalDesk",
    "ApprovalSink",
    "DeltaRedactor",
    "EgressProxy",
    "EventRedactor",
    "GitBroker",
    "GuardBroker",
    "LoopbackRelay",
    "McpBroker",
    "ModelProxy",
    "TurnCredentials",
    "agent_env",
    "check_secrets",
    "exposed_secrets",
    "git_auth_env",
    "host_allowed",
    "inline_google_credentials",
    "proxy_enabled",
    "proxy_env",
    "redact_event",
    "redact_text",
    "redact_tree",
    "resolve_secrets",
    "routed_secret_names",
    "secret_forms",
    "secret_values",
    "wake",
]
