"""The stored records are frozen values with closed vocabularies (no store needed)."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from harness_run.events import RunResult
from harness_run.store import EngineRecord, SessionRecord, SnapshotRef, TurnRecord


def session() -> SessionRecord:
    return SessionRecord(
        session_id="s1", engine="eng", version="v1", harness="codex", created_at=1.0, updated_at=1.0
    )


def test_records_are_frozen_and_change_by_copy() -> None:
    record = session()
    with pytest.raises(ValidationError, match="frozen"):
        record.status = "running"  # type: ignore[misc]
    with pytest.raises(ValidationError, match="frozen"):
        EngineRecord(name="e", version="v", spec={}).runtime = "sandbox"  # type: ignore[misc]
    with pytest.raises(ValidationError, match="frozen"):
        TurnRecord(session_id="s1", turn=1, prompt="p", started_at=1.0).prompt = "q"  # type: ignore[misc]
    with pytest.raises(ValidationError, match="frozen"):
        SnapshotRef().turn = 2  # type: ignore[misc]

    running = record.model_copy(update={"status": "running", "turns": 1})
    assert (running.status, running.turns) == ("running", 1)
    assert (record.status, record.turns) == ("idle", 0)  # the original is unchanged
    done = running.model_copy(update={"last_result": RunResult(text="ok"), "stop_reason": "completed"})
    assert done.last_result == RunResult(text="ok") and done.status == "running"


@pytest.mark.parametrize(
    ("make", "field"),
    [
        (lambda: session().model_copy(update={"status": "paused"}), "status"),
        (lambda: session().model_copy(update={"stop_reason": "bored"}), "stop_reason"),
        (lambda: SessionRecord.model_validate({**session().model_dump(), "status": "paused"}), "status"),
        (lambda: EngineRecord(name="e", version="v", spec={}, runtime="moon"), "runtime"),  # type: ignore[arg-type]
    ],
)
def test_a_literal_field_refuses_a_value_outside_its_vocabulary(make: object, field: str) -> None:
    with pytest.raises(ValidationError) as caught:
        make()  # type: ignore[operator]
    assert caught.value.errors()[0]["loc"] == (field,)
    assert caught.value.errors()[0]["type"] == "literal_error"


def test_an_update_naming_no_field_is_refused() -> None:
    with pytest.raises(ValueError, match="SessionRecord has no field statu"):
        session().model_copy(update={"statu": "idle"})
