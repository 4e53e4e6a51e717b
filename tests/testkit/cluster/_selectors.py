"""Label and field selectors, as the API server parses them (``labelSelector=``, ``fieldSelector=``)."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any, cast

__all__ = ["SelectorError", "parse_field_selector", "parse_label_selector"]

Matcher = Callable[[Mapping[str, Any]], bool]

_SET_RE = re.compile(r"^\s*(!?)\s*([A-Za-z0-9_./-]+)\s*(?:(notin|in)\s*\(([^)]*)\))?\s*$")
_OP_RE = re.compile(r"^\s*([A-Za-z0-9_./-]+)\s*(==|!=|=)\s*([A-Za-z0-9_.-]*)\s*$")


class SelectorError(ValueError):
    pass


def _split(selector: str) -> list[str]:
    """Split on commas outside parentheses."""
    parts: list[str] = []
    depth = 0
    current = ""
    for ch in selector:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append(current)
            current = ""
        else:
            current += ch
    parts.append(current)
    return [p for p in (s.strip() for s in parts) if p]


def _requirement(text: str) -> Callable[[Mapping[str, str]], bool]:
    op = _OP_RE.match(text)
    if op:
        key, operator, value = op.groups()
        if operator == "!=":
            return lambda labels: labels.get(key) != value
        return lambda labels: labels.get(key) == value
    match = _SET_RE.match(text)
    if not match:
        raise SelectorError(f"unable to parse requirement: {text!r}")
    negated, key, operator, values = match.groups()
    if operator:
        if negated:
            raise SelectorError(f"unable to parse requirement: {text!r}")
        options = {v.strip() for v in values.split(",") if v.strip()}
        if operator == "in":
            return lambda labels: labels.get(key) in options
        return lambda labels: labels.get(key) not in options
    if negated:
        return lambda labels: key not in labels
    return lambda labels: key in labels


def parse_label_selector(selector: str | None) -> Matcher:
    """``a=b,c!=d,e in (f,g),h notin (i),j,!k`` -> a predicate on an object."""
    requirements = [_requirement(part) for part in _split(selector or "")]

    def matches(obj: Mapping[str, Any]) -> bool:
        labels = cast(Mapping[str, str], (obj.get("metadata") or {}).get("labels") or {})
        return all(req(labels) for req in requirements)

    return matches


def parse_field_selector(selector: str | None) -> Matcher:
    """``metadata.name=x,metadata.namespace!=y`` (the fields every resource supports)."""
    checks: list[tuple[str, bool, str]] = []
    for part in _split(selector or ""):
        op = _OP_RE.match(part)
        if not op or op.group(1) not in ("metadata.name", "metadata.namespace"):
            raise SelectorError(
                f"field selector {part!r} is not supported: only metadata.name and metadata.namespace "
                "with =, == or !="
            )
        checks.append((op.group(1).split(".")[1], op.group(2) == "!=", op.group(3)))

    def matches(obj: Mapping[str, Any]) -> bool:
        meta = cast(Mapping[str, Any], obj.get("metadata") or {})
        return all((meta.get(key) == value) != negated for key, negated, value in checks)

    return matches
