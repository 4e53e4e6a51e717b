"""YAML in and out for spec files: safe loading, duplicate keys refused, stable output.

Imported lazily by the spec (PyYAML costs ~30 ms to import).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from harness_run.errors import SpecError, SpecIssue

__all__ = ["dump_yaml", "load_spec_file", "load_yaml"]


class _StrictLoader(yaml.SafeLoader):
    """SafeLoader that refuses duplicate keys (YAML would silently keep the last one)."""


def _construct_mapping(loader: _StrictLoader, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
    seen: set[Any] = set()
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=deep)  # type: ignore[no-untyped-call]
        try:
            duplicate = key in seen
        except TypeError:  # unhashable key
            raise yaml.constructor.ConstructorError(
                None, None, "a mapping key must be a plain value", key_node.start_mark
            ) from None
        if duplicate:
            raise yaml.constructor.ConstructorError(None, None, f"duplicate key {key!r}", key_node.start_mark)
        seen.add(key)
    return loader.construct_mapping(node, deep=deep)  # type: ignore[no-untyped-call]


_StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)


def _is_file(text: str) -> bool:
    """Whether ``text`` names an existing file; one-line YAML may be too long to be a path."""
    try:
        return Path(text).is_file()
    except (OSError, ValueError):  # e.g. ENAMETOOLONG, embedded NUL
        return False


def load_yaml(source: str | Path) -> tuple[Any, str | None]:
    """Parse YAML from a path (Path, or a str naming an existing file) or from text."""
    name: str | None = None
    if isinstance(source, Path) or ("\n" not in source and _is_file(source)):
        name = str(source)
        try:
            text = Path(source).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise SpecError([SpecIssue("<file>", f"cannot read {name}: {exc}", "check the path")]) from None
    else:
        text = source
    try:
        return yaml.load(text, Loader=_StrictLoader), name
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}" if mark is not None else "<yaml>"
        problem = getattr(exc, "problem", None) or str(exc)
        raise SpecError(
            [SpecIssue(where, f"not valid YAML: {problem}", "fix the YAML syntax")], source=name
        ) from None
    except RecursionError:
        raise SpecError(
            [SpecIssue("<yaml>", "nested too deeply", "simplify the file")], source=name
        ) from None
    except (ValueError, TypeError, AttributeError, LookupError, ArithmeticError) as exc:
        # PyYAML's constructors raise these for explicitly tagged values they cannot build,
        # e.g. `!!timestamp x`, `!!int abc`, `!!bool maybe`, `!!timestamp 2024-13-45`
        raise SpecError(
            [
                SpecIssue(
                    "<yaml>",
                    f"not valid YAML: a tagged value cannot be read ({exc})",
                    "remove the !!tag or fix the value",
                )
            ],
            source=name,
        ) from None


def load_spec_file(path: str | Path) -> tuple[Any, str]:
    """Read a spec file: ``.json`` as JSON, anything else as YAML (JSON is valid YAML too)."""
    data, name = load_yaml(Path(path))
    return data, name or str(path)


def dump_yaml(data: Any) -> str:
    return yaml.safe_dump(data, sort_keys=False, allow_unicode=True, default_flow_style=False, width=100)
