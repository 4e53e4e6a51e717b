"""Approval records in both history stores: pending, listed, decided once (compare-and-set)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from harness_run.errors import ApprovalNotFoundError, UsageError
from harness_run.store import ApprovalRecord, ApprovalStore, SessionRecord, open_store

SID = "0b7a3c1e-4e8f-4d61-9d1a-0d3c6f2b9a11"


@pytest.fixture(params=["sqlite", pytest.param("gcs", marks=pytest.mark.integration)])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Any]:
    url = str(tmp_path / "store") if request.param == "sqlite" else request.getfixturevalue("gcs_store_url")
    opened = open_store(url)
    now = time.time()
    opened.put_session(
        SessionRecord(
            session_id=SID, engine="eng", version="v1", harness="codex", created_at=now, updated_at=now
        )
    )
    try:
        yield opened
    finally:
        opened.close()


def _record(request_id: str, *, expires_in: float = 60.0, kind: str = "approval") -> ApprovalRecord:
    now = time.time()
    return ApprovalRecord.model_validate(
        {
            "session_id": SID,
            "turn": 1,
            "request_id": request_id,
            "kind": kind,
            "tool": "Bash",
            "command": "git push origin main",
            "input": {"command": "git push origin main"},
            "question": "Which branch?" if kind == "question" else None,
            "created_at": now,
            "expires_at": now + expires_in,
        }
    )


def test_pending_then_decided_once(store: Any) -> None:
    assert isinstance(store, ApprovalStore)
    store.put_approval(_record("r1"))
    store.put_approval(_record("r2"))
    assert [r.request_id for r in store.list_approvals(SID, pending=True)] == ["r1", "r2"]
    decided = store.decide_approval(SID, "r1", decision="deny", by="client", reason="not today", key_id="k1")
    assert (decided.decision, decided.by, decided.reason, decided.key_id) == (
        "deny",
        "client",
        "not today",
        "k1",
    )
    assert decided.decided_at is not None
    assert store.get_approval(SID, "r1") == decided
    assert [r.request_id for r in store.list_approvals(SID, pending=True)] == ["r2"]
    assert len(store.list_approvals(SID)) == 2
    with pytest.raises(UsageError, match="already decided \\(deny, by client\\)"):
        store.decide_approval(SID, "r1", decision="allow", by="client")
    with pytest.raises(ApprovalNotFoundError, match="no approval request 'nope'"):
        store.decide_approval(SID, "nope", decision="allow", by="client")
    assert store.get_approval(SID, "nope") is None


def test_expired_request_refuses_a_client_but_takes_the_timeout(store: Any) -> None:
    store.put_approval(_record("old", expires_in=-1.0))
    with pytest.raises(UsageError, match="expired"):
        store.decide_approval(SID, "old", decision="allow", by="client")
    decided = store.decide_approval(SID, "old", decision="deny", by="timeout", reason="nobody decided")
    assert (decided.decision, decided.by) == ("deny", "timeout")


def test_questions_take_answers_not_decisions(store: Any) -> None:
    store.put_approval(_record("q1", kind="question"))
    with pytest.raises(UsageError, match="is a question"):
        store.decide_approval(SID, "q1", decision="allow", by="client")
    answered = store.decide_approval(SID, "q1", answer="main", by="client")
    assert (answered.answer, answered.by, answered.decision) == ("main", "client", None)
    store.put_approval(_record("a1"))
    with pytest.raises(UsageError, match="needs allow or deny"):
        store.decide_approval(SID, "a1", answer="yes", by="client")


def test_concurrent_decisions_one_wins(store: Any) -> None:
    """Eight clients decide the same request at once: exactly one succeeds."""
    store.put_approval(_record("race"))
    wins: list[str] = []
    losses: list[str] = []

    def decide(i: int) -> None:
        try:
            store.decide_approval(
                SID, "race", decision="allow" if i % 2 else "deny", by="client", key_id=f"k{i}"
            )
            wins.append(f"k{i}")
        except UsageError:
            losses.append(f"k{i}")

    threads = [threading.Thread(target=decide, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(wins) == 1 and len(losses) == 7
    assert store.get_approval(SID, "race").key_id == wins[0]


def test_deleting_the_session_deletes_its_requests(store: Any) -> None:
    store.put_approval(_record("r1"))
    store.delete_session(SID)
    assert store.list_approvals(SID) == []
