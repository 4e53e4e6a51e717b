"""YAML in and out for spec files: safe loading, duplicate keys refused, stable output.

Loading is bounded: documents of at most ``MAX_DOCUMENT_BYTES`` and ``MAX_DOCUMENT_DEPTH`` levels,
and no anchors or aliases (``&a`` / ``*a``): a few hundred bytes of nested aliases expand to
billions of values (a "billion laughs" bomb), and spec files have no use for them.

Imported lazily by the spec (PyYAML costs ~30 ms to import).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Final

import yaml
from yaml.composer import ComposerError
from yaml.error import Mark

from harness_run.errors import SpecError, SpecIssue

__all__ = ["MAX_DOCUMENT_BYTES", "MAX_DOCUMENT_DEPTH", "dump_yaml", "load_spec_file", "load_yaml"]

MAX_DOCUMENT_BYTES: Final = 1024 * 1024
MAX_DOCUMENT_DEPTH: Final = 100


class _StrictLoader(yaml.SafeLoader):
    """SafeLoader that refuses duplicate keys (YAML would silently keep the last one), anchors and
    aliases, and nesting deeper than ``MAX_DOCUMENT_DEPTH``."""

    _depth = 0

    def compose_node(self, parent: yaml.Node | None, index: int) -> yaml.Node | None:
        if self.check_event(yaml.AliasEvent):
            raise _Refused(_NO_ANCHORS, _WRITE_OUT, self.get_mark())
        if self._depth >= MAX_DOCUMENT_DEPTH:
            raise _Refused(
                f"nested too deeply (more than {MAX_DOCUMENT_DEPTH} levels)", _SIMPLIFY, self.get_mark()
            )
        self._depth += 1
        try:
            node = super().compose_node(parent, index)
        finally:
            self._depth -= 1
        if self.anchors:  # the node (or one inside it) was given an &anchor
            raise _Refused(_NO_ANCHORS, _WRITE_OUT, node.start_mark if node else self.get_mark())
        return node


class _Refused(ComposerError):
    """Valid YAML this loader does not accept; ``fix`` says what to write instead."""

    def __init__(self, problem: str, fix: str, mark: Mark | None) -> None:
        super().__init__(None, None, problem, mark)
        self.fix = fix


_NO_ANCHORS: Final = "YAML anchors and aliases (&name, *name, <<: *name) are not accepted in spec files"
_WRITE_OUT: Final = "write the values out in full instead of &anchor / *alias"
_SIMPLIFY: Final = "simplify the file"


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
        text = _read(Path(source), name)
    else:
        text = source
    if len(text) > MAX_DOCUMENT_BYTES:
        raise SpecError(
            [
                SpecIssue(
                    "<yaml>",
                    f"the document is larger than {MAX_DOCUMENT_BYTES // 1024} KiB",
                    "keep long prompts and schemas in code or separate files",
                )
            ],
            source=name,
        )
    if "\x00" in text:
        raise SpecError(
            [
                SpecIssue(
                    "<yaml>", "the document contains a NUL character", "remove it (is it a binary file?)"
                )
            ],
            source=name,
        )
    try:
        return yaml.load(text, Loader=_StrictLoader), name
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}" if mark is not None else "<yaml>"
        problem = getattr(exc, "problem", None) or str(exc)
        if isinstance(exc, _Refused):
            raise SpecError([SpecIssue(where, problem, exc.fix)], source=name) from None
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


def _read(path: Path, name: str) -> str:
    try:
        with path.open("rb") as file:
            data = file.read(MAX_DOCUMENT_BYTES + 1)
        return data.decode("utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise SpecError([SpecIssue("<file>", f"cannot read {name}: {exc}", "check the path")]) from None


def load_spec_file(path: str | Path) -> tuple[Any, str]:
    """Read a spec file: ``.json`` as JSON, anything else as YAML (JSON is valid YAML too)."""
    data, name = load_yaml(Path(path))
    return data, name or str(path)


def dump_yaml(data: Any) -> str:
    # types-PyYAML annotates `width` with _typeshed.FloatInt, which pyright's bundled typeshed lacks
    return yaml.safe_dump(  # pyright: ignore[reportUnknownMemberType]
        data, sort_keys=False, allow_unicode=True, default_flow_style=False, width=100
    )
