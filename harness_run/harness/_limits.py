"""``max_turns`` and ``max_budget_usd`` for harnesses whose CLI cannot enforce them (Codex, OpenCode).

The parser feeds :class:`TurnLimits` what it learns from the CLI's output — each finished model
response's usage (and the CLI's own cost, if any), and when a response's tool calls are done — and
gets a :class:`StopRequest` back once a limit is reached; the process then stops the CLI's process
group. The semantics follow Claude Code's own flags:

- ``max_turns`` = model responses per turn: after the N-th response's tool calls ran, the turn stops
  (``stop_reason="max_turns"``) instead of asking the model again;
- ``max_budget_usd``: once the turn's cost (the CLI's figure, else tokens times the price table) passes
  the budget, the turn stops (``stop_reason="max_budget"``); usage and cost so far are kept.

Both are errors of the turn (``is_error``), as Claude Code reports them. A CLI that asks the model
again the moment its tools finish may get its next request out before the stop lands; that answer
is never used (the process group is gone). A budget needs a price: a
spec with a budget on a harness and model we cannot price is refused before launch
(:func:`budget_problem`).
"""

from __future__ import annotations

from harness_run.events import Usage
from harness_run.harness._base import StopRequest
from harness_run.spec import AgentSpec
from harness_run.vocab.pricing import price, rates

__all__ = ["TurnLimits", "budget_problem"]


def budget_problem(spec: AgentSpec, harness: str) -> tuple[str, str] | None:
    """``("max_budget_usd", why)`` when a budget cannot be enforced for the spec's model."""
    if spec.max_budget_usd is None or rates(spec.model) is not None:
        return None
    return (
        "max_budget_usd",
        f"{harness} reports no cost for {spec.model!r} and harness-run's price table has no price "
        "for it, so a budget cannot be enforced (add the model to harness_run/vocab/pricing.py "
        "or drop max_budget_usd)",
    )


class TurnLimits:
    def __init__(self, spec: AgentSpec) -> None:
        self.model = spec.model
        self.max_turns = spec.max_turns
        self.budget = spec.max_budget_usd

    def cost(self, usage: Usage, reported: float | None = None) -> float | None:
        """The CLI's cost when it gave a positive one, else the table's price (None: unknown)."""
        return reported if reported else price(self.model, usage)

    def after_response(self, usage: Usage, reported: float | None = None) -> StopRequest | None:
        """Call when a model response's usage is known (cumulative for the turn)."""
        if self.budget is None:
            return None
        cost = self.cost(usage, reported)
        if cost is not None and cost > self.budget:
            return StopRequest(
                "max_budget", f"Reached maximum budget (${self.budget:g}): the turn cost ${cost:.6g}"
            )
        return None

    def after_tools(self, responses: int) -> StopRequest | None:
        """Call when a response asked for tools and they have run: ``responses`` so far this turn."""
        if self.max_turns is not None and responses >= self.max_turns:
            return StopRequest("max_turns", f"Reached maximum number of turns ({self.max_turns})")
        return None
