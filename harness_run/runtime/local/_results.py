"""A turn's result as the local engine stores it: completed with the session's facts (duration,
price, structured output checked against the spec's schema), or turned into an error when the
store fails."""

from __future__ import annotations

import time
from typing import Any

from pydantic import BaseModel, ValidationError

from harness_run.errors import StoreError, redact
from harness_run.events import ResultEvent, RunResult
from harness_run.runtime._run import Run
from harness_run.runtime._session import TurnOutcome
from harness_run.spec import AgentSpec
from harness_run.store import SessionRecord
from harness_run.vocab.pricing import price

__all__ = ["complete_result", "store_failed"]


def store_failed(
    record: SessionRecord, run: Run, result: RunResult, exc: StoreError, values: list[str]
) -> TurnOutcome:
    """The turn could not be stored: an error result saying so; the session stays at its last
    stored turn (the next turn takes this one's number) and takes new turns."""
    message = (
        f"the turn ended ({result.stop_reason}) but could not be stored: {redact(str(exc), values)}; "
        "free disk space or fix the store, then run the turn again"
    )
    failed = result.model_copy(update={"is_error": True, "stop_reason": "error", "error": message})
    if run.result is None:
        run.emit(ResultEvent(result=failed))
    after = record.model_copy(update={"status": "failed", "last_result": failed, "stop_reason": "error"})
    return TurnOutcome(failed, after)


def complete_result(
    spec: AgentSpec, session_id: str, run: Run, result: RunResult, started: float
) -> RunResult:
    update: dict[str, Any] = {
        "session_id": session_id,
        "turn": run.turn,
        "harness": spec.harness,
        "model": spec.model,
        "duration_s": round(time.monotonic() - started, 3),
    }
    if result.cost_usd is None and result.usage.total_tokens > 0:  # no usage reported: unknown, not 0
        update["cost_usd"] = price(spec.model, result.usage)
    schema, output = spec.output_schema, result.structured_output
    if isinstance(schema, type) and issubclass(schema, BaseModel) and output is not None:
        try:
            update["structured_output"] = schema.model_validate(output)
        except ValidationError as exc:
            update.update(
                is_error=True,
                stop_reason="error",
                error=f"the structured output does not match {schema.__name__}: {exc.errors()[0]['msg']}",
            )
    return result.model_copy(update=update)
