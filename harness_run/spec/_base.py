"""Shared base for spec models: frozen, strict keys, and errors converted to :class:`SpecError`.

Every way into a spec model — ``Model(...)``, ``Model.model_validate*``, ``from_dict`` and the
loaders built on it — reports problems as one :class:`SpecError` listing every field path with its
fix. Pydantic validates nested models by calling their ``__init__`` too, so only the outermost
call converts; inner ones let pydantic's error through for it to collect (a context variable
counts the nesting).
"""

from __future__ import annotations

from collections.abc import Generator, Mapping, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from functools import cache
from typing import Any, Final, Self, cast, get_args

from pydantic import BaseModel, ConfigDict, ValidationError, model_validator
from pydantic_core import PydanticCustomError

from harness_run.errors import SpecError, SpecIssue

__all__ = ["SpecModel", "from_document", "in_document", "issues_from_validation", "spec_errors", "spec_fail"]

# Fixes for pydantic's own error types (ours carry a ``fix`` in their context).
_GENERIC_FIXES: dict[str, str] = {
    "missing": "add this required field",
    "extra_forbidden": "remove it or check the spelling (see `harness-run schema` for the known keys)",
    "literal_error": "use one of the allowed values",
    "union_tag_invalid": "set `kind` to one of the allowed values",
    "union_tag_not_found": "add a `kind` field",
    "string_type": "give a string",
    "int_type": "give a whole number",
    "int_parsing": "give a whole number",
    "float_type": "give a number",
    "float_parsing": "give a number",
    "bool_type": "give true or false",
    "bool_parsing": "give true or false",
    "dict_type": "give a mapping of key: value",
    "list_type": "give a list",
    "tuple_type": "give a list",
    "greater_than": "give a larger value",
    "greater_than_equal": "give a larger value",
    "less_than_equal": "give a smaller value",
    "string_too_short": "give a non-empty value",
    "model_type": "give a mapping of fields",
    "model_attributes_type": "give a mapping of fields",
    "finite_number": "give a finite number",
    "recursion_loop": "remove the cycle",
}

_UNION_TAGS = frozenset({"git", "local", "stdio", "remote"})

_nesting: ContextVar[int] = ContextVar("harness_run_spec_nesting", default=0)
_document: ContextVar[bool] = ContextVar("harness_run_spec_document", default=False)


def spec_fail(message: str, fix: str, field: str | None = None) -> PydanticCustomError:
    """An error for use inside validators: pydantic adds the field path, we keep the fix.

    ``field`` names the field for errors raised by model-level validators (which have no path).
    """
    ctx = {"message": message, "fix": fix}
    if field:
        ctx["field"] = field
    return PydanticCustomError("spec", "{message}", ctx)


def _path(loc: tuple[int | str, ...]) -> str:
    parts: list[str] = []
    previous: int | str | None = None
    for item in loc:
        after_index, previous = isinstance(previous, int), item
        if isinstance(item, int):
            parts.append(f"[{item}]")
        elif item.startswith(("function-", "tagged-union[", "json-or-python[")) or item in {
            "str",
            "dict[str,str]",
        }:
            continue  # pydantic-internal union branch names carry no meaning for users
        elif after_index and item in _UNION_TAGS:
            continue  # the discriminated-union branch, e.g. mcp_servers[0].remote
        elif not item.isprintable() or not item.strip() or item != item.strip():
            parts.append(f"[{item!r}]")  # an empty/whitespace/control-character key: keep it visible
        else:
            parts.append(f".{item}" if parts else item)
    return "".join(parts)


def issues_from_validation(exc: ValidationError) -> list[SpecIssue]:
    issues: list[SpecIssue] = []
    for err in exc.errors(include_url=False, include_input=False):
        ctx = err.get("ctx") or {}
        kind = err["type"]
        message = str(ctx.get("message") or err["msg"])
        message = message.removeprefix("Value error, ").removeprefix("Assertion failed, ")
        fix = str(ctx.get("fix") or _GENERIC_FIXES.get(kind, ""))
        if kind == "extra_forbidden":
            message = "unknown key"
        elif kind == "union_tag_invalid":
            message = f"unknown kind {ctx.get('tag')!r}; expected one of {ctx.get('expected_tags')}"
        path = _path(tuple(err["loc"]))
        if ctx.get("field"):
            field = str(ctx["field"])
            path = f"{path}{'' if field.startswith('[') else '.'}{field}" if path else field
        issues.append(SpecIssue(path, message, fix))
    return issues


@contextmanager
def spec_errors(source: str | None = None) -> Generator[None]:
    """Turn pydantic's ValidationError into SpecError — at the outermost validation only."""
    depth = _nesting.get()
    token = _nesting.set(depth + 1)
    try:
        yield
    except ValidationError as exc:
        if depth:
            raise  # a nested model: the outer validation adds its location and collects it
        raise SpecError(issues_from_validation(exc), source=source) from None
    except RecursionError:
        if depth:
            raise
        raise SpecError(
            [SpecIssue("<spec>", "nested too deeply", "simplify the file")], source=source
        ) from None
    finally:
        _nesting.reset(token)


@contextmanager
def from_document() -> Generator[None]:
    """Validation of a spec *document* (YAML/JSON text or file) rather than of Python objects.

    Documents may only name what is inside their own reach: skill paths relative to the file, and
    network git URLs. Local sources (absolute paths, ``file://``) are for specs built in code.
    """
    token = _document.set(True)
    try:
        yield
    finally:
        _document.reset(token)


def in_document() -> bool:
    return _document.get()


_KEY_MESSAGE: Final = "unknown key (not a string)"
_KEY_FIX: Final = "keys are field names; see `harness-run schema` for the known keys"


def _as_mapping(value: object) -> Mapping[object, Any] | None:
    return cast("Mapping[object, Any]", value) if isinstance(value, Mapping) else None


def _as_sequence(value: object) -> Sequence[object] | None:
    return cast("Sequence[object]", value) if isinstance(value, list | tuple) else None


def _non_string_key(value: object) -> tuple[object] | None:
    """The first key of a mapping that is not a string, in a 1-tuple (the key may be None)."""
    mapping = _as_mapping(value)
    return next(((k,) for k in mapping if not isinstance(k, str)), None) if mapping is not None else None


def _check_top_keys(data: object, source: str | None) -> None:
    key = _non_string_key(data)
    if key is not None:
        raise SpecError([SpecIssue(f"[{key[0]!r}]", _KEY_MESSAGE, _KEY_FIX)], source=source)


def _holds_models(annotation: object) -> bool:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return True
    return any(_holds_models(arg) for arg in get_args(annotation))


@cache
def _model_fields(cls: type[BaseModel]) -> tuple[str, ...]:
    """The fields of ``cls`` whose values are (or contain) models."""
    return tuple(name for name, info in cls.model_fields.items() if _holds_models(info.annotation))


class SpecModel(BaseModel):
    """Frozen, ``extra="forbid"``; constructing or validating bad values raises :class:`SpecError`."""

    model_config = ConfigDict(frozen=True, extra="forbid", validate_default=True, defer_build=True)

    def __init__(self, /, **data: Any) -> None:
        with spec_errors():
            super().__init__(**data)

    @model_validator(mode="before")
    @classmethod
    def _string_keys(cls, data: Any) -> Any:
        """Pydantic validates a nested model by calling its ``__init__`` with the mapping as keywords,
        which Python refuses (TypeError) for keys that are not strings: report those first."""
        fields = _as_mapping(data)
        if fields is not None:
            for name in _model_fields(cls):
                value = fields.get(name)
                items = _as_sequence(value)
                for index, item in enumerate(items) if items is not None else [(None, value)]:
                    key = _non_string_key(item)
                    if key is not None:
                        where = f"{name}[{index}]" if index is not None else name
                        raise spec_fail(_KEY_MESSAGE, _KEY_FIX, field=f"{where}[{key[0]!r}]")
        return data

    @classmethod
    def model_validate(cls, obj: Any, **options: Any) -> Self:
        """Pydantic's ``model_validate``, raising :class:`SpecError`."""
        _check_top_keys(obj, None)
        with spec_errors():
            return super().model_validate(obj, **options)

    @classmethod
    def model_validate_json(cls, json_data: str | bytes | bytearray, **options: Any) -> Self:
        """Pydantic's ``model_validate_json``, raising :class:`SpecError`."""
        with spec_errors():
            return super().model_validate_json(json_data, **options)

    @classmethod
    def model_validate_strings(cls, obj: Any, **options: Any) -> Self:
        """Pydantic's ``model_validate_strings``, raising :class:`SpecError`."""
        with spec_errors():
            return super().model_validate_strings(obj, **options)

    @classmethod
    def from_dict(cls, data: Any, *, source: str | None = None) -> Self:
        """Validate plain data (as read from YAML/JSON) into this model, or raise SpecError."""
        if _as_mapping(data) is None:
            raise SpecError(
                [
                    SpecIssue(
                        "<spec>",
                        f"expected a mapping, got {type(data).__name__}",
                        "write the spec as key: value pairs",
                    )
                ],
                source=source,
            )
        _check_top_keys(data, source)
        with spec_errors(source):
            return super().model_validate(data)

    def to_dict(self, *, exclude_defaults: bool = False) -> dict[str, Any]:
        """Plain JSON-compatible data; ``from_dict(to_dict())`` gives an equal object."""
        data = self.model_dump(mode="json", exclude_defaults=exclude_defaults, by_alias=True)
        if exclude_defaults:  # serializer-backed fields are not dropped by pydantic itself
            data = {
                k: v
                for k, v in data.items()
                if v is not None or type(self).model_fields[k].default is not None
            }
        return data

    def set_fields(self) -> dict[str, Any]:
        """The explicitly given fields only (for sparse overlays)."""
        return {name: getattr(self, name) for name in self.model_fields_set}
