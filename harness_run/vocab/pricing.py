"""A small price table, used when a harness reports no cost itself (USD per million tokens).

``cost = tokens * price``; unknown models give ``None`` — never a made-up 0 — and the turn gets a
``cost_unknown`` event saying so (:func:`unknown_cost_event`). A budget (``max_budget_usd``)
on a harness that reports no cost can only be enforced for a model this table knows. Prices as
published by the vendors; update with the pins.
"""

from __future__ import annotations

from harness_run.events import CostUnknownEvent, Usage

__all__ = ["PRICES", "price", "rates", "unknown_cost_event"]

# model prefix (longest match wins) -> (input, output, cache read, cache write) per 1M tokens.
# OpenAI counts no cache writes; reasoning tokens are billed as output.
PRICES: dict[str, tuple[float, float, float, float]] = {
    "claude-opus-4": (15.0, 75.0, 1.5, 18.75),
    "claude-opus-4-5": (5.0, 25.0, 0.5, 6.25),
    "claude-opus-4-6": (5.0, 25.0, 0.5, 6.25),
    "claude-sonnet-4": (3.0, 15.0, 0.3, 3.75),
    "claude-haiku-4": (1.0, 5.0, 0.1, 1.25),
    "claude-3-5-haiku": (0.8, 4.0, 0.08, 1.0),
    "gpt-5-mini": (0.25, 2.0, 0.025, 0.0),
    "gpt-5-nano": (0.05, 0.4, 0.005, 0.0),
    "gpt-5": (1.25, 10.0, 0.125, 0.0),
    "gpt-4.1-mini": (0.4, 1.6, 0.1, 0.0),
    "gpt-4.1": (2.0, 8.0, 0.5, 0.0),
    "gpt-4o-mini": (0.15, 0.6, 0.075, 0.0),
    "gpt-4o": (2.5, 10.0, 1.25, 0.0),
    "gpt-5-pro": (15.0, 120.0, 0.0, 0.0),
    "o3": (2.0, 8.0, 0.5, 0.0),
    "o3-pro": (20.0, 80.0, 0.0, 0.0),
    "o4-mini": (1.1, 4.4, 0.275, 0.0),
}
_BY_LENGTH = sorted(PRICES, key=len, reverse=True)


def _name(model: str) -> str:
    """``openrouter/openai/gpt-5.1`` and ``openai/gpt-5.1`` are priced as ``gpt-5.1``."""
    return model.lower().rsplit("/", 1)[-1]


def rates(model: str) -> tuple[float, float, float, float] | None:
    """The table's (input, output, cache read, cache write) USD per 1M tokens, or None if unknown."""
    name = _name(model)
    for prefix in _BY_LENGTH:
        if "-pro" in name and "-pro" not in prefix:
            continue  # "pro" variants cost several times their base model: unknown unless listed
        if (
            name == prefix
            or name.startswith((f"{prefix}-", f"{prefix}."))
            or (name.startswith(prefix) and not name[len(prefix)].isalnum())
        ):
            return PRICES[prefix]
    return None


def price(model: str, usage: Usage) -> float | None:
    """The cost of ``usage`` on ``model`` in USD, or None for a model the table does not know."""
    found = rates(model)
    if found is None:
        return None
    inp, out, read, write = found
    total = (
        usage.input_tokens * inp
        + (usage.output_tokens + usage.reasoning_tokens) * out
        + usage.cache_read_tokens * read
        + usage.cache_write_tokens * write
    )
    return round(total / 1_000_000, 8)


def unknown_cost_event(model: str, harness: str) -> CostUnknownEvent:
    """What a turn emits when neither the harness nor our table can price its model."""
    return CostUnknownEvent(
        model=model,
        harness=harness,
        message=(
            f"{harness} reports no cost and harness-run's price table has no price for "
            f"{model!r}: cost_usd will be None (usage is still counted)"
        ),
    )
