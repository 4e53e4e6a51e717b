"""Approval requests in the bucket: ``<session>/approvals/<request_id>.json``, decided by
compare-and-set on the object's generation (the first decision wins across every client)."""

from __future__ import annotations

from harness_run.errors import StoreError
from harness_run.store._approvals import ApprovalDecision, ApprovalRecord, DecidedBy, decided, not_found
from harness_run.store._gcs_io import Conflict
from harness_run.store._gcs_layout import GcsLayout, check_part

__all__ = ["GcsApprovals"]

_ATTEMPTS = 20


class GcsApprovals(GcsLayout):
    """The approval methods of :class:`~harness_run.store.GcsStore`."""

    def _approval_name(self, session_id: str, request_id: str, *, write: bool = False) -> str:
        check_part("approval request id", request_id)
        return self._session_name(session_id, "approvals", f"{request_id}.json", write=write)

    def put_approval(self, record: ApprovalRecord) -> None:
        name = self._approval_name(record.session_id, record.request_id, write=True)
        self._write(name, record.model_dump_json().encode(), generation=None)

    def get_approval(self, session_id: str, request_id: str) -> ApprovalRecord | None:
        return self._get_record(ApprovalRecord, self._approval_name(session_id, request_id))

    def list_approvals(self, session_id: str, *, pending: bool = False) -> list[ApprovalRecord]:
        blobs = self._list(self._session_name(session_id, "approvals", ""))
        names = sorted(b.name for b in blobs if b.name.endswith(".json"))
        records = self._get_records(ApprovalRecord, names)
        records = [r for r in records if r.pending] if pending else records
        return sorted(records, key=lambda r: (r.created_at, r.request_id))

    def decide_approval(
        self,
        session_id: str,
        request_id: str,
        *,
        decision: ApprovalDecision | None = None,
        answer: str | None = None,
        by: DecidedBy,
        reason: str | None = None,
        key_id: str | None = None,
    ) -> ApprovalRecord:
        """The first decision wins: a write conditional on the generation that was read."""
        name = self._approval_name(session_id, request_id, write=True)
        for _ in range(_ATTEMPTS):
            got = self._read(name)
            if got is None:
                raise not_found(session_id, request_id)
            current = self._load(ApprovalRecord, got[0], name)
            new = decided(current, decision=decision, answer=answer, by=by, reason=reason, key_id=key_id)
            try:
                self._write(name, new.model_dump_json().encode(), generation=got[1])
                return new
            except Conflict:  # decided (or rewritten) meanwhile: read again, refuse a second decision
                continue
        raise StoreError(f"cannot decide {self._where(name)}: it kept changing; try again", retryable=True)
