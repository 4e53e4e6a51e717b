"""``ApprovalPolicy``: which tool calls wait for a person before they run (human in the loop).

The policy is data; the turn's guard (``harness_run/harness/_guard.py`` and the engine's
``GuardBroker``) pauses a matching call, stores a pending request, emits ``approval_request`` and
waits until someone decides (``session.approve``/``deny`` from any process) or ``timeout_s`` passes
(then it is denied). Anything that breaks the approval path denies the call: it fails closed.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Annotated

from pydantic import AfterValidator, Field

from harness_run.spec._base import SpecModel
from harness_run.spec._security import BashPattern
from harness_run.spec._types import ToolName

__all__ = ["ApprovalPolicy"]


def _unique(value: tuple[str, ...]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(value))


class ApprovalPolicy(SpecModel):
    """Tool calls that wait for a person's decision before they run.

    - ``commands``: shell commands that wait, as glob patterns (``*`` matches anything; ``"*"``
      alone: every command), matched like ``security_policy.denied_bash_patterns`` against the
      whole command and each simple command in it (``git push*`` catches ``cd app && git push``);
    - ``tools``: harness tool names that wait (``WebFetch``, ``mcp__github__create_pr`` …);
    - ``file_writes``: every file write or edit waits (the request shows the path and, for edits,
      a diff);
    - ``timeout_s``: seconds to wait for a decision; nobody answered: the call is denied.

    A denied call does not run: the harness gets the reason as the tool's error and the model goes
    on. The turn's own ``timeout`` does not count the time spent waiting.
    """

    commands: Annotated[tuple[BashPattern, ...], AfterValidator(_unique)] = Field(
        default=(), description="Shell command glob patterns that wait for approval ('git push*', '*')."
    )
    tools: Annotated[tuple[ToolName, ...], AfterValidator(_unique)] = Field(
        default=(), description="Harness tool names that wait for approval."
    )
    file_writes: bool = Field(default=False, description="Every file write or edit waits for approval.")
    timeout_s: float = Field(
        default=600.0,
        gt=0,
        le=86400,
        allow_inf_nan=False,
        description="Seconds to wait for a decision; then the call is denied.",
    )

    if TYPE_CHECKING:

        def __init__(
            self,
            *,
            commands: Sequence[str] = (),
            tools: Sequence[str] = (),
            file_writes: bool = False,
            timeout_s: float = 600.0,
        ) -> None: ...

    @property
    def asks_anything(self) -> bool:
        """Whether any tool call can wait (a policy with nothing to match changes nothing)."""
        return bool(self.commands or self.tools or self.file_writes)

    def merged(self, other: ApprovalPolicy | None) -> ApprovalPolicy:
        """Both policies' patterns and tools, either's ``file_writes``, the shorter timeout: what a
        team server applies when a caller's overlay may only add approvals."""
        if other is None:
            return self
        return ApprovalPolicy(
            commands=(*self.commands, *other.commands),
            tools=(*self.tools, *other.tools),
            file_writes=self.file_writes or other.file_writes,
            timeout_s=min(self.timeout_s, other.timeout_s),
        )
