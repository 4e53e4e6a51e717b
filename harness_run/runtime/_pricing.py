"""A small price table, used only when a harness reports no cost itself (USD per million tokens).

Unknown models give ``None`` — never a made-up 0. Prices as published by the vendors; update with
the pins.
"""

from __future__ import annotations

from harness_run.events import Usage

__all__ = ["PRICES", "price"]

# model prefix -> (input, output, cache read, cache write) per 1M tokens
PRICES: dict[str, tuple[float, float, float, float]] = {
    "claude-opus-4": (15.0, 75.0, 1.5, 18.75),
    "claude-sonnet-4": (3.0, 15.0, 0.3, 3.75),
    "claude-haiku-4": (1.0, 5.0, 0.1, 1.25),
    "gpt-5-mini": (0.25, 2.0, 0.025, 0.0),
    "gpt-5-nano": (0.05, 0.4, 0.005, 0.0),
    "gpt-5": (1.25, 10.0, 0.125, 0.0),
}


def price(model: str, usage: Usage) -> float | None:
    name = model.lower().rsplit("/", 1)[-1]
    for prefix in sorted(PRICES, key=len, reverse=True):
        if name.startswith(prefix):
            inp, out, read, write = PRICES[prefix]
            total = (
                usage.input_tokens * inp
                + (usage.output_tokens + usage.reasoning_tokens) * out
                + usage.cache_read_tokens * read
                + usage.cache_write_tokens * write
            )
            return round(total / 1_000_000, 8)
    return None
