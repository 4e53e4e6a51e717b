"""One idempotent setup step (the plan's unit)."""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["Step"]


@dataclass(frozen=True, slots=True)
class Step:
    """One idempotent step. ``audit`` succeeding (exit 0, and ``expect`` in its output when given)
    means the step is done; otherwise ``apply`` runs, in order. ``{project_number}`` in a command is
    filled from the project audit."""

    key: str
    title: str
    why: str
    audit: tuple[str, ...]
    apply: tuple[tuple[str, ...], ...]
    expect: str | None = None
    needs: tuple[str, ...] = field(default_factory=tuple[str, ...])
    forbid: str | None = None
    """Also done only when this is *not* in the audit's output (a grant that must be gone)."""
    stdin: str | None = None
    """Fed to each ``apply`` command's standard input (a manifest for ``kubectl apply -f -``)."""
