"""``SecurityPolicy`` under HarnessBox's name.

The enforcing model (``harness_run.spec.SecurityPolicy``, ``AgentSpec.security_policy``) is being
built on another branch; until it is merged this is the same data with the same fields, and
:class:`~harness_run.harnessbox.HarnessBox` refuses a policy it cannot enforce rather than ignore it.
When the spec has ``security_policy``, this module re-exports that model instead.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["SecurityPolicy"]


class SecurityPolicy(BaseModel):
    """Tools and shell patterns the agent may not use, network blocking, credential guards."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    denied_tools: list[str] = Field(default_factory=list[str])
    denied_bash_patterns: list[str] = Field(default_factory=list[str])
    deny_network: bool = False
    include_credential_guards: bool = True
