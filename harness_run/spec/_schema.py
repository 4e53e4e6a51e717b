"""``output_schema``: a pydantic model class, or a JSON Schema object checked as one.

A schema dict must be plain JSON (string keys, finite numbers, no NUL), bounded in size and depth
(a YAML alias bomb or a self-referencing dict cannot blow up), describe an object at the top, and
be a structurally valid JSON Schema (draft 2020-12, what pydantic emits): each keyword the
meta-schema defines has a value of the right shape. Unknown keywords are annotations and allowed.
"""

from __future__ import annotations

import math
import re
from typing import Any, Final, cast

from pydantic import BaseModel

from harness_run.spec._base import spec_fail

__all__ = ["MAX_SCHEMA_DEPTH", "MAX_SCHEMA_NODES", "OutputSchema", "check_output_schema", "json_schema_of"]

OutputSchema = type[BaseModel] | dict[str, Any]

MAX_SCHEMA_NODES: Final = 20_000
MAX_SCHEMA_DEPTH: Final = 64

_TYPES: Final = frozenset({"array", "boolean", "integer", "null", "number", "object", "string"})
_SUBSCHEMA: Final = frozenset(
    {
        *("items", "contains", "additionalProperties", "propertyNames", "if", "then", "else", "not"),
        *("unevaluatedItems", "unevaluatedProperties", "contentSchema"),
    }
)
_SCHEMA_MAP: Final = frozenset(
    {"properties", "patternProperties", "dependentSchemas", "$defs", "definitions"}
)
_SCHEMA_LIST: Final = frozenset({"allOf", "anyOf", "oneOf", "prefixItems"})
_NUMBER: Final = frozenset({"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"})
_COUNT: Final = frozenset(
    {
        *("minLength", "maxLength", "minItems", "maxItems", "minContains", "maxContains"),
        *("minProperties", "maxProperties"),
    }
)
_STRING: Final = frozenset(
    {
        *("$schema", "$ref", "$dynamicRef", "$recursiveRef", "$comment", "title", "description"),
        *("format", "contentEncoding", "contentMediaType"),
    }
)
_ANCHOR_KEYS: Final = frozenset({"$anchor", "$dynamicAnchor", "$recursiveAnchor"})
_ANCHOR: Final = re.compile(r"^[A-Za-z_][-A-Za-z0-9._]*$")
_BOOL: Final = frozenset({"uniqueItems", "deprecated", "readOnly", "writeOnly"})
_FIX: Final = (
    "write a JSON Schema (draft 2020-12), e.g. {'type': 'object', 'properties': {'a': {'type': 'string'}}}"
)


def json_schema_of(schema: OutputSchema | None) -> dict[str, Any] | None:
    """The JSON Schema of an output schema (a pydantic model class or a schema dict)."""
    if schema is None:
        return None
    if isinstance(schema, dict):
        return schema
    return schema.model_json_schema()


def check_output_schema(value: Any) -> OutputSchema | None:
    if value is None:
        return None
    if isinstance(value, type) and issubclass(value, BaseModel):
        return value
    if not isinstance(value, dict):
        raise spec_fail(
            "output_schema must be a pydantic model class or a JSON Schema object",
            "pass e.g. MyResult (a BaseModel subclass) or {'type': 'object', ...}",
        )
    schema: dict[str, Any] = _JsonCopy().copy(value, 0)
    if schema.get("type") != "object":
        raise spec_fail(
            "output_schema must describe a JSON object (type: object at the top)",
            "wrap the value in an object, e.g. {'type': 'object', 'properties': {...}}",
        )
    problem = _schema_problem(schema, ())
    if problem is not None:
        where, message = problem
        raise spec_fail(f"not a valid JSON Schema: {message}", _FIX, field=_dotted(where))
    return schema


def _as_dict(value: object) -> dict[Any, Any] | None:
    return cast("dict[Any, Any]", value) if isinstance(value, dict) else None


def _as_list(value: object) -> list[Any] | None:
    return cast("list[Any]", value) if isinstance(value, list | tuple) else None


def _dotted(where: tuple[str | int, ...]) -> str | None:
    text = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in where).lstrip(".")
    return text or None


class _JsonCopy:
    """A plain-JSON copy of the data, or ``spec_fail``; counts nodes so shared references (one
    list repeated a million times over) cannot make the copy explode."""

    def __init__(self) -> None:
        self.nodes = 0

    def copy(self, value: Any, depth: int) -> Any:
        self.nodes += 1
        if self.nodes > MAX_SCHEMA_NODES or depth > MAX_SCHEMA_DEPTH:
            raise spec_fail(
                f"output_schema is too large or nested too deeply (at most {MAX_SCHEMA_NODES} values, "
                f"{MAX_SCHEMA_DEPTH} levels)",
                "simplify the schema",
            )
        if (mapping := _as_dict(value)) is not None:
            copied: dict[str, Any] = {}
            for key, item in mapping.items():
                if not isinstance(key, str):
                    return self._not_json(f"the key {key!r} is not a string")
                copied[self._text(key)] = self.copy(item, depth + 1)
            return copied
        if (items := _as_list(value)) is not None:
            return [self.copy(item, depth + 1) for item in items]
        if isinstance(value, str):
            return self._text(value)
        if isinstance(value, float) and not math.isfinite(value):
            return self._not_json(f"{value!r} is not a JSON number")
        if value is None or isinstance(value, bool | int | float):
            return value
        return self._not_json(f"a {type(value).__name__} is not a JSON value")

    @staticmethod
    def _text(value: str) -> str:
        if "\x00" in value:
            raise spec_fail("output_schema contains a NUL character", "remove the NUL character")
        return value

    @staticmethod
    def _not_json(why: str) -> Any:
        raise spec_fail(
            f"output_schema is not JSON-serializable: {why}",
            "use only JSON types (string keys, finite numbers) inside the schema",
        )


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _is_count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _string_set(value: Any) -> bool:
    items = _as_list(value)
    return items is not None and all(isinstance(v, str) for v in items) and len(set(items)) == len(items)


def _keyword_problem(key: str, value: Any) -> str | None:
    """What is wrong with one keyword's value (sub-schemas are checked by the caller)."""
    if key == "type":
        if isinstance(value, str):
            return None if value in _TYPES else f"unknown type {value!r} (one of {sorted(_TYPES)})"
        if _string_set(value) and value and set(value) <= _TYPES:
            return None
        return f"type must be one of {sorted(_TYPES)} or a non-empty list of distinct ones"
    if key in _NUMBER and not _is_number(value):
        return f"{key} must be a number"
    if key == "multipleOf" and not (_is_number(value) and value > 0):
        return "multipleOf must be a number above 0"
    if key in _COUNT and not _is_count(value):
        return f"{key} must be a whole number >= 0"
    if key in _STRING and not isinstance(value, str):
        return f"{key} must be a string"
    if key in _ANCHOR_KEYS and not (isinstance(value, str) and _ANCHOR.match(value)):
        return f"{key} must be a name (letters, digits, '-', '_', '.')"
    if key == "$id" and not (isinstance(value, str) and "#" not in value.rstrip("#")):
        return "$id must be a URI without a fragment"
    if key in _BOOL and not isinstance(value, bool):
        return f"{key} must be true or false"
    if key == "required" and not _string_set(value):
        return "required must be a list of distinct property names"
    if key in {"enum", "examples"} and not isinstance(value, list):
        return f"{key} must be a list"
    if key == "pattern":
        return _regex_problem(value)
    return _map_keyword_problem(key, value)


def _map_keyword_problem(key: str, value: Any) -> str | None:
    mapping = _as_dict(value)
    if key == "$vocabulary" and not (
        mapping is not None and all(isinstance(v, bool) for v in mapping.values())
    ):
        return "$vocabulary must map URIs to true or false"
    if key == "dependentRequired" and not (mapping is not None and all(map(_string_set, mapping.values()))):
        return "dependentRequired must map property names to lists of distinct names"
    return None


def _regex_problem(value: Any) -> str | None:
    if not isinstance(value, str):
        return "a pattern must be a string"
    try:
        re.compile(value)
    except (re.error, OverflowError, RecursionError) as exc:
        return f"{value!r} is not a regular expression ({exc})"
    return None


def _schema_problem(schema: Any, where: tuple[str | int, ...]) -> tuple[tuple[str | int, ...], str] | None:
    """The first structural problem in a (sub-)schema, with its location, or None."""
    if isinstance(schema, bool):
        return None
    mapping = _as_dict(schema)
    if mapping is None:
        return where, "a schema must be an object (or true/false)"
    for key, value in mapping.items():
        here = (*where, key)
        problem = _keyword_problem(key, value)
        if problem is not None:
            return here, problem
        found = _children_problem(key, value, here)
        if found is not None:
            return found
    return None


def _children_problem(
    key: str, value: Any, here: tuple[str | int, ...]
) -> tuple[tuple[str | int, ...], str] | None:
    if key in _SUBSCHEMA:
        return _schema_problem(value, here)
    if key in _SCHEMA_MAP or key == "dependencies":
        mapping = _as_dict(value)
        if mapping is None:
            return here, f"{key} must map names to schemas"
        for name, sub in mapping.items():
            if key == "patternProperties" and (problem := _regex_problem(name)) is not None:
                return (*here, name), problem
            if key == "dependencies" and _string_set(sub):
                continue  # the legacy form of dependentRequired
            found = _schema_problem(sub, (*here, name))
            if found is not None:
                return found
    if key in _SCHEMA_LIST:
        items = _as_list(value)
        if not items:
            return here, f"{key} must be a non-empty list of schemas"
        for index, sub in enumerate(items):
            found = _schema_problem(sub, (*here, index))
            if found is not None:
                return found
    return None
