"""``GitOptions``: when a session's work is committed and pushed back to its branch."""

from __future__ import annotations

import re
import string
from typing import Literal, Self

from pydantic import field_validator, model_validator

from harness_run.spec._base import SpecModel, spec_fail
from harness_run.spec._types import Text

__all__ = ["CommitMoment", "GitOptions"]

CommitMoment = Literal["after_turn", "on_close", "never"]

_AUTHOR = re.compile(r"^(?P<name>[^<>\n]*[^<>\s])\s*<(?P<email>[^<>\s@]+@[^<>\s]+)>$")
MESSAGE_FIELDS = frozenset({"engine", "session_id", "turn", "branch"})


class GitOptions(SpecModel):
    """When the agent's changes are committed and pushed (spec, ``SessionConfig`` or ``TurnConfig``;
    an overlay's ``git`` replaces the spec's as a whole).

    ``commit``: ``"after_turn"`` (after every turn), ``"on_close"`` (when the engine holding the
    session is closed) or ``"never"``. ``push`` sends the commit to the session's branch (the first
    repo's) with the repo's ``auth`` secret. ``author`` is ``"Name <email>"``; ``message`` a template
    with ``{engine}``, ``{session_id}``, ``{turn}`` and ``{branch}``.
    """

    commit: CommitMoment = "never"
    push: bool = False
    author: Text = "harness-run <harness-run@localhost>"
    message: Text = "harness-run: {engine} session {session_id} turn {turn}"

    @field_validator("author")
    @classmethod
    def _author(cls, value: str) -> str:
        if not _AUTHOR.match(value):
            raise spec_fail(f"{value!r} is not 'Name <email>'", "write it like 'Ada Bot <ada@example.com>'")
        return value

    @field_validator("message")
    @classmethod
    def _message(cls, value: str) -> str:
        try:
            names = {f for _, f, _, _ in string.Formatter().parse(value) if f is not None}
        except ValueError as exc:
            raise spec_fail(f"is not a valid template ({exc})", "write literal braces as {{ and }}") from None
        unknown = sorted(names - MESSAGE_FIELDS)
        if unknown:
            raise spec_fail(
                f"uses unknown placeholders {unknown}",
                f"use only {{{'}, {'.join(sorted(MESSAGE_FIELDS))}}}",
            )
        if not value.strip():
            raise spec_fail("is blank", "give a commit message template")
        return value

    @model_validator(mode="after")
    def _push_needs_commit(self) -> Self:
        if self.push and self.commit == "never":
            raise spec_fail(
                "push needs something to push",
                "set commit to 'after_turn' or 'on_close', or push to false",
                field="push",
            )
        return self

    @property
    def author_name(self) -> str:
        match = _AUTHOR.match(self.author)
        return match.group("name") if match else self.author

    @property
    def author_email(self) -> str:
        match = _AUTHOR.match(self.author)
        return match.group("email") if match else ""

    def render_message(self, *, engine: str, session_id: str, turn: int, branch: str) -> str:
        return self.message.format(engine=engine, session_id=session_id, turn=turn, branch=branch)
