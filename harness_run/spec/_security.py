"""``SecurityPolicy``: what the agent may not do, compiled into each harness's own mechanism.

The policy is data; the harness adapters turn it into the CLI's deny rules and a pre-tool-use guard
(see ``harness_run/harness/_guard.py``), and refuse what a CLI cannot enforce.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Annotated

from pydantic import AfterValidator, Field

from harness_run.spec._base import SpecModel, spec_fail
from harness_run.spec._types import ToolName

__all__ = ["SecurityPolicy"]


def _bash_pattern(value: str) -> str:
    if not value.strip():
        raise spec_fail("is empty", "give a command pattern such as 'git push*'")
    if any(ch in value for ch in "\n\r\0"):
        raise spec_fail("holds a line break or NUL", "give one command pattern per entry")
    if len(value) > 500:
        raise spec_fail("is longer than 500 characters", "shorten the pattern (use * wildcards)")
    return value


BashPattern = Annotated[str, AfterValidator(_bash_pattern)]


def _unique(value: tuple[str, ...]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(value))


class SecurityPolicy(SpecModel):
    """What the agent may not do, enforced by the harness before a tool runs.

    - ``denied_tools``: tool names the agent may not call (``WebFetch``, ``Task``, an MCP tool
      ``mcp__<server>__<tool>`` …), in the harness's own naming as for ``disallowed_tools``.
    - ``denied_bash_patterns``: shell commands refused, as glob patterns (``*`` matches anything)
      matched against the whole command and against each simple command in it (``git push*``
      refuses ``cd app && git push origin main``).
    - ``deny_network``: the agent's tools get no network (web tools refused, and the harness's OS
      sandbox cuts the network of its shell commands); refused where a harness cannot enforce it.
    - ``include_credential_guards`` (default on): refuse the usual ways to read credentials —
      ``env``/``printenv``/``os.environ``, ``/proc/*/environ``, ``.env`` files, ``~/.aws/credentials``,
      ``~/.config/gcloud``, ``git config credential.*``/``--get-regexp``, the cloud metadata server
      (169.254.169.254, ``metadata.google.internal``), web-fetch tools and sub-agents.

    The guard fails closed: a guard that errors or does not answer in time denies the tool call.
    """

    denied_tools: Annotated[tuple[ToolName, ...], AfterValidator(_unique)] = Field(
        default=(), description="Tool names the agent may not call."
    )
    denied_bash_patterns: Annotated[tuple[BashPattern, ...], AfterValidator(_unique)] = Field(
        default=(), description="Shell command glob patterns the agent may not run ('git push*')."
    )
    deny_network: bool = Field(default=False, description="No network for the agent's tools.")
    include_credential_guards: bool = Field(
        default=True, description="Refuse the known ways to read credentials (see the docs)."
    )

    if TYPE_CHECKING:

        def __init__(
            self,
            *,
            denied_tools: Sequence[str] = (),
            denied_bash_patterns: Sequence[str] = (),
            deny_network: bool = False,
            include_credential_guards: bool = True,
        ) -> None: ...

    @property
    def is_default(self) -> bool:
        return self == SecurityPolicy()

    @property
    def enforces_anything(self) -> bool:
        return bool(
            self.denied_tools
            or self.denied_bash_patterns
            or self.deny_network
            or self.include_credential_guards
        )
