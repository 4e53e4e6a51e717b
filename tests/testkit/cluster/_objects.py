"""Object helpers of the emulated API server: watch events, timestamps, errors, merge patches."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, cast

import kmock

__all__ = ["Obj", "WatchEvent", "api_error", "merge_patch", "now", "spec_part"]

Obj = dict[str, Any]


@dataclass(frozen=True, slots=True)
class WatchEvent:
    rv: int
    type: str  # ADDED / MODIFIED / DELETED
    key: tuple[str, str, str]
    namespace: str | None
    old: Obj | None
    new: Obj


def now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def api_error(status: int, reason: str, message: str, details: Mapping[str, Any] | None = None) -> Exception:
    return kmock.KubernetesError(status=status, reason=reason, message=message, details=dict(details or {}))


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result: Obj = copy.deepcopy(cast(Obj, target)) if isinstance(target, dict) else {}
    for key, value in cast(Obj, patch).items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


def spec_part(obj: Obj) -> Obj:
    return {k: v for k, v in obj.items() if k not in ("metadata", "status")}
