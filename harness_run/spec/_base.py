"""Shared base for spec models: frozen, strict keys, and errors converted to :class:`SpecError`."""

from __future__ import annotations

from typing import Any, ClassVar, Self

from pydantic import BaseModel, ConfigDict, ValidationError
from pydantic._internal._model_construction import ModelMetaclass
from pydantic_core import PydanticCustomError

from harness_run.errors import SpecError, SpecIssue

__all__ = ["SpecModel", "issues_from_validation", "spec_fail"]

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
}


_UNION_TAGS = frozenset({"git", "local", "stdio", "remote"})


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


def issues_from_validation(exc: ValidationError, prefix: str = "") -> list[SpecIssue]:
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
        if prefix:
            path = f"{prefix}.{path}" if path else prefix
        issues.append(SpecIssue(path, message, fix))
    return issues


class _SpecMeta(ModelMetaclass):
    """Direct construction (``AgentSpec(...)``) raises SpecError instead of ValidationError.

    Done in the metaclass, not ``__init__``: pydantic calls a custom ``__init__`` for nested
    models too, which would nest our error inside its own.
    """

    def __call__(cls, *args: Any, **kwargs: Any) -> Any:
        positional: tuple[str, ...] = getattr(cls, "_positional", ())
        if args and len(args) <= len(positional):  # e.g. Secret("GH_TOKEN", required=False)
            kwargs = {**dict(zip(positional, args, strict=False)), **kwargs}
            args = ()
        try:
            return super().__call__(*args, **kwargs)
        except ValidationError as exc:
            raise SpecError(issues_from_validation(exc, getattr(cls, "_error_prefix", ""))) from None


class SpecModel(BaseModel, metaclass=_SpecMeta):
    """Frozen, ``extra="forbid"``; constructing with bad values raises :class:`SpecError`."""

    model_config = ConfigDict(frozen=True, extra="forbid", validate_default=True, defer_build=True)
    _error_prefix: ClassVar[str] = ""
    _positional: ClassVar[tuple[str, ...]] = ()
    """Fields that may also be given positionally."""

    @classmethod
    def from_dict(cls, data: Any, *, source: str | None = None) -> Self:
        """Validate plain data (as read from YAML/JSON) into this model, or raise SpecError."""
        if not isinstance(data, dict):
            raise SpecError(
                [
                    SpecIssue(
                        cls._error_prefix,
                        f"expected a mapping, got {type(data).__name__}",
                        "write the spec as key: value pairs",
                    )
                ],
                source=source,
            )
        try:
            return cls.model_validate(data)
        except ValidationError as exc:
            raise SpecError(issues_from_validation(exc, cls._error_prefix), source=source) from None
        except RecursionError:
            raise SpecError(
                [SpecIssue(cls._error_prefix, "nested too deeply", "simplify the file")], source=source
            ) from None

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
