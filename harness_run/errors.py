"""One error tree for harness-run, split by audience.

- :class:`SpecError` and :class:`UsageError` — the caller's input is wrong; the message names the
  field (``path``) and says how to fix it. Never retryable.
- :class:`RunError` — a turn could not run or ended badly (harness crash, missing binary, protocol
  error). Carries the exit code and the stderr tail where there is one.
- :class:`InfrastructureError` — something we depend on (Docker, the store, a registry) failed;
  ``retryable`` says whether trying again may help.

Every message is safe to log: secret values never appear in it (see ``redact``). Every error
survives ``pickle`` and ``copy`` (e.g. across processes) with its message and attributes.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Self, cast

__all__ = [
    "ApprovalNotFoundError",
    "BuildError",
    "HarnessNotFoundError",
    "HarnessRunError",
    "InfrastructureError",
    "PermissionDeniedError",
    "ProtocolError",
    "RunError",
    "SessionBusyError",
    "SessionNotFoundError",
    "SpecError",
    "SpecIssue",
    "StoreError",
    "UsageError",
    "redact",
]


def _restore(cls: type[HarnessRunError], args: tuple[Any, ...], state: dict[str, Any]) -> HarnessRunError:
    """Unpickle without calling ``__init__`` (whose parameters differ from ``args``)."""
    error = cls.__new__(cls, *args)
    error.args = args
    error.__dict__.update(state)
    return error


class HarnessRunError(Exception):
    """Base of every error harness-run raises on purpose."""

    retryable: bool = False

    def __reduce__(self) -> tuple[Any, ...]:
        # Exception's default re-calls ``cls(*self.args)``: wrong for every subclass whose
        # ``__init__`` takes something else than the final message (SpecError takes issues).
        return (_restore, (type(self), self.args, dict(self.__dict__)))


class UsageError(HarnessRunError, ValueError):
    """The API or CLI was called wrongly; the message says how to call it."""


class SpecIssue:
    """One problem found in a spec: where (a dotted path), what, and how to fix it."""

    __slots__ = ("fix", "message", "path")

    def __init__(self, path: str, message: str, fix: str = "") -> None:
        self.path = path or "<spec>"
        self.message = message
        self.fix = fix

    def __reduce__(self) -> tuple[type[Self], tuple[str, str, str]]:
        return (type(self), (self.path, self.message, self.fix))

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, SpecIssue):
            return NotImplemented
        return (self.path, self.message, self.fix) == (other.path, other.message, other.fix)

    def __hash__(self) -> int:
        return hash((self.path, self.message, self.fix))

    def __str__(self) -> str:
        text = f"{self.path}: {self.message}"
        return f"{text} (fix: {self.fix})" if self.fix else text

    def __repr__(self) -> str:
        return f"SpecIssue({self.path!r}, {self.message!r}, {self.fix!r})"


class SpecError(UsageError):
    """An AgentSpec, SessionConfig or TurnConfig is invalid.

    ``issues`` lists every problem with its field path; ``str()`` shows them one per line.
    """

    def __init__(self, issues: Iterable[SpecIssue], *, source: str | None = None) -> None:
        self.issues = list(issues)
        self.source = source
        head = f"invalid spec{f' in {source}' if source else ''}"
        body = "\n".join(f"  - {issue}" for issue in self.issues)
        super().__init__(f"{head}:\n{body}" if body else head)

    @property
    def paths(self) -> list[str]:
        return [issue.path for issue in self.issues]


class RunError(HarnessRunError):
    """A turn could not be run or the harness failed outside the model's control."""

    def __init__(self, message: str, *, exit_code: int | None = None, stderr_tail: str = "") -> None:
        self.exit_code = exit_code
        self.stderr_tail = stderr_tail
        text = message
        if exit_code is not None:
            text += f" (exit code {exit_code})"
        if stderr_tail:
            text += f"\n--- stderr (last lines) ---\n{stderr_tail}"
        super().__init__(text)


class HarnessNotFoundError(RunError):
    """The harness CLI binary is not installed where we looked."""


class ProtocolError(RunError):
    """The harness printed something we could not understand."""


class SessionBusyError(UsageError):
    """``run()`` was called while the session's previous turn is still running."""


class SessionNotFoundError(UsageError, KeyError):
    """No session with that id exists in the engine's store."""

    def __str__(self) -> str:  # KeyError would repr() the message
        return str(self.args[0]) if self.args else ""


class ApprovalNotFoundError(UsageError, KeyError):
    """No approval request or question with that id in the session (``session.approve`` …)."""

    def __str__(self) -> str:  # KeyError would repr() the message
        return str(self.args[0]) if self.args else ""


class PermissionDeniedError(UsageError):
    """The caller may not do this: a team server's API key lacks the scope, or the operator's
    policy (``serve --policy``) does not let callers change ``field``. ``allow`` names the setting
    that would allow it (a scope, a policy key or a ``serve`` flag). The server answers 403."""

    def __init__(self, message: str, *, field: str | None = None, allow: str | None = None) -> None:
        super().__init__(message)
        self.field = field
        self.allow = allow


class InfrastructureError(HarnessRunError):
    """A dependency (Docker, a registry, the history store, a worker or server over HTTP) failed.

    When the failure was an HTTP answer, ``status`` is its status code and ``code`` the error code of
    its body (``"unauthorized"``, ``"internal"``, …); code that reacts to a failure reads these,
    never the message, which is for people.
    """

    status: int | None = None
    code: str | None = None

    def __init__(
        self, message: str, *, retryable: bool = False, status: int | None = None, code: str | None = None
    ) -> None:
        self.retryable = retryable
        self.status = status
        self.code = code
        super().__init__(message)


class BuildError(InfrastructureError):
    """Building or staging the agent image failed."""


class StoreError(InfrastructureError):
    """The history store could not read or write a record."""


def redact(text: str, secrets: Mapping[str, str] | Iterable[str] | None) -> str:
    """Replace every secret value found in ``text`` with ``***``.

    Values shorter than 4 characters are left alone (they would mangle ordinary text).
    """
    if not secrets or not text:
        return text
    # (isinstance narrows an Iterable[str] to Mapping[str, Unknown]: say what it is)
    values = cast("Mapping[str, str]", secrets).values() if isinstance(secrets, Mapping) else secrets
    for value in sorted({v for v in values if v and len(v) >= 4}, key=len, reverse=True):
        text = text.replace(value, "***")
    return text
