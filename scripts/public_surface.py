"""harness-run's public surface: every public module's ``__all__``, where the docs show each name,
which packages import it, and what docs/reference/public-surface.md says about it.

A public module is one whose dotted path has no ``_``-prefixed part and that defines ``__all__``. A
module that warns ``DeprecationWarning`` on import is a deprecated alias and is only listed.

A name is *documented* when a page of the site (docs/, not the decision records) or README.md shows
it: an mkdocstrings directive renders it (``::: module`` with it among its members, or
``::: module.name``), or the name appears as a word in the page's code (inline code spans and fenced
blocks) and so does its module (``harness_run.testing``, or ``from harness_run import testing``).

    .venv/bin/python scripts/public_surface.py             # each module's counts and names
    .venv/bin/python scripts/public_surface.py --counts    # the counts only
    .venv/bin/python scripts/public_surface.py --check     # exit 1 if the page is out of date
    .venv/bin/python scripts/public_surface.py --json      # all of it, for tests/test_public_surface.py

``--check`` fails when a public name is missing from the page, when the page lists a name (or a
module) that is not exported, or when a name of a user-facing module is neither documented nor given
a reason on the page. ``tests/test_public_surface.py`` enforces the last two.
"""

from __future__ import annotations

import argparse
import ast
import importlib
import json
import pkgutil
import re
import sys
import textwrap
import warnings
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "reference" / "public-surface.md"
PACKAGE = "harness_run"
# the user-facing API; every other public module is an internal layer
USER_FACING = (
    "harness_run",
    "harness_run.local",
    "harness_run.sandbox",
    "harness_run.providers",
    "harness_run.harnessbox",
    "harness_run.harnessbox.providers",
    "harness_run.harnessbox.workspace",
    "harness_run.spec",
    "harness_run.events",
    "harness_run.errors",
    "harness_run.testing",
    "harness_run.testing.pytest_plugin",
)
# where the importers of a name are looked for
SOURCES = ("harness_run", "tests", "examples", "benchmarks", "scripts")

_DIRECTIVE = re.compile(r"^::: ([\w.]+)\n((?:    .*\n)*)", re.M)
_FENCE = re.compile(r"^\s*(```|~~~)")
_CODE_SPAN = re.compile(r"(`+)(.+?)\1")
_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_HEADING = re.compile(r"^#{2,3} (.*)$", re.M)
_MODULE = re.compile(r"`(harness_run[\w.]*)`$")
_NAMES_CELL = re.compile(r"`([A-Za-z_][\w]*)`")


@dataclass
class Module:
    name: str
    names: list[str]
    deprecated: str | None = None  # the warning's text, for a deprecated alias

    @property
    def user_facing(self) -> bool:
        return self.name in USER_FACING


@dataclass
class Row:
    """One row of a module's table on the page: some names, a status and a reason or link."""

    names: list[str]
    status: str
    why: str

    @property
    def supported(self) -> bool:
        return self.status.strip().lower().startswith("supported")


@dataclass
class Page:
    tables: dict[str, list[Row]] = field(default_factory=dict[str, list[Row]])

    def row_of(self, module: str, name: str) -> Row | None:
        return next((r for r in self.tables.get(module, []) if name in r.names), None)


def public_modules() -> list[Module]:
    """Every public module of the package, in dotted order."""
    found: list[Module] = []

    def visit(module: ModuleType, deprecated: str | None) -> None:
        names = getattr(module, "__all__", None)
        if names is not None:
            found.append(Module(module.__name__, list(names), deprecated))
        for info in pkgutil.iter_modules(getattr(module, "__path__", []), module.__name__ + "."):
            if info.name.rsplit(".", 1)[1].startswith("_"):
                continue
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                child = importlib.import_module(info.name)
            notes = [str(w.message) for w in caught if issubclass(w.category, DeprecationWarning)]
            visit(child, notes[0] if notes else None)

    visit(importlib.import_module(PACKAGE), None)
    return sorted(found, key=lambda m: m.name)


def doc_pages() -> list[Path]:
    """The user documentation: docs/**/*.md but the decision records and this audit, and README."""
    pages = [ROOT / "README.md"]
    for path in sorted((ROOT / "docs").rglob("*.md")):
        if path == PAGE or "decisions" in path.relative_to(ROOT / "docs").parts:
            continue
        pages.append(path)
    return pages


def _code(text: str) -> str:
    """A page's code: its fenced blocks and inline code spans, one per line."""
    code: list[str] = []
    fenced = False
    for line in text.splitlines():
        if _FENCE.match(line):
            fenced = not fenced
        elif fenced:
            code.append(line)
        else:
            code.extend(span.group(2) for span in _CODE_SPAN.finditer(line))
    return "\n".join(code)


def _mentions_module(code: str, module: str) -> bool:
    parent, _, last = module.rpartition(".")
    return bool(
        re.search(rf"(?<![\w.]){re.escape(module)}(?![\w])", code)
        or (parent and re.search(rf"from {re.escape(parent)} import [^\n]*\b{last}\b", code))
    )


def _rendered(text: str, modules: dict[str, Module]) -> set[tuple[str, str]]:
    """The (module, name) pairs that a page's mkdocstrings directives render."""
    shown: set[tuple[str, str]] = set()
    for match in _DIRECTIVE.finditer(text):
        target = match.group(1)
        block: dict[str, Any] = yaml.safe_load(textwrap.dedent(match.group(2))) or {}
        options: dict[str, Any] = block.get("options") or {}
        if target in modules:
            members: list[str] | bool = options.get("members", True)
            listed = modules[target].names if members is True else members or []
            shown.update((target, str(n)) for n in listed)
        else:
            owner, _, name = target.rpartition(".")
            shown.add((owner, name))
    return shown


def documentation(modules: list[Module]) -> dict[tuple[str, str], list[str]]:
    """For each (module, name): the pages that show it, those that render it first."""
    by_name = {m.name: m for m in modules}
    where: dict[tuple[str, str], list[str]] = {}
    for path in doc_pages():
        text = path.read_text()
        page = str(path.relative_to(ROOT))
        code = _code(text)
        rendered, words = _rendered(text, by_name), set(_WORD.findall(code))
        for module in modules:
            mentioned = _mentions_module(code, module.name)
            for name in module.names:
                if (module.name, name) in rendered:
                    where.setdefault((module.name, name), []).insert(0, page)
                elif mentioned and name in words:
                    where.setdefault((module.name, name), []).append(page)
    return where


def _importer(path: Path) -> str:
    """The package a source file belongs to: the dotted path without its private parts."""
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[0] != PACKAGE:
        return parts[0]
    public = [p for p in parts if p != "__init__"]
    while public and public[-1].startswith("_"):
        public.pop()
    return ".".join(public)


def importers(modules: list[Module]) -> dict[tuple[str, str], set[str]]:
    """For each (module, name): the packages (outside the module) that import it or use it as
    ``module.name``."""
    exported = {m.name: set(m.names) for m in modules}
    aliases_of = {m.name for m in modules if m.deprecated}  # they re-export; they use nothing
    used: dict[tuple[str, str], set[str]] = {}
    for top in SOURCES:
        for path in sorted((ROOT / top).rglob("*.py")):
            who = _importer(path)
            if who not in aliases_of:
                for key in _uses(ast.parse(path.read_text(), str(path)), who, exported):
                    used.setdefault(key, set()).add(who)
    return used


def _uses(tree: ast.Module, who: str, exported: dict[str, set[str]]) -> Iterator[tuple[str, str]]:
    """The (module, name) pairs a source file imports (also through a private module of the
    package) or reaches as ``module.name``, but those of its own module."""
    aliases: dict[str, str] = {}  # local name -> the public module it is bound to
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            owner = _public_owner(node.module, exported)
            for alias in node.names:
                if f"{node.module}.{alias.name}" in exported:
                    aliases[alias.asname or alias.name] = f"{node.module}.{alias.name}"
                elif owner and owner != who and alias.name in exported[owner]:
                    yield owner, alias.name
        elif isinstance(node, ast.Import):
            aliases.update({a.asname: a.name for a in node.names if a.name in exported and a.asname})
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute):
            target = _dotted(node.value, aliases)
            if target in exported and target != who:
                yield target, node.attr


def _public_owner(module: str, exported: dict[str, set[str]]) -> str | None:
    """The public module that a (possibly private) module belongs to: ``a.b._c`` -> ``a.b``."""
    parts = module.split(".")
    while parts and any(p.startswith("_") for p in parts):
        parts.pop()
    owner = ".".join(parts)
    return owner if owner in exported else None


def _dotted(node: ast.expr, aliases: dict[str, str]) -> str | None:
    if isinstance(node, ast.Name):
        return aliases.get(node.id, node.id)
    if isinstance(node, ast.Attribute):
        base = _dotted(node.value, aliases)
        return f"{base}.{node.attr}" if base else None
    return None


def read_page(path: Path = PAGE) -> Page:
    """The tables of docs/reference/public-surface.md, by module."""
    page = Page()
    text = path.read_text() if path.exists() else ""
    headings = list(_HEADING.finditer(text))
    for i, match in enumerate(headings):
        module = _MODULE.fullmatch(match.group(1).strip())
        if module is None:
            continue  # not a module's table
        end = headings[i + 1].start() if i + 1 < len(headings) else len(text)
        rows = page.tables.setdefault(module.group(1), [])
        for line in text[match.end() : end].splitlines():
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            if not line.startswith("|") or len(cells) < 3 or set(cells[0]) <= {"-", " ", ":"}:
                continue
            names = _NAMES_CELL.findall(cells[0])
            if names:
                rows.append(Row(names, cells[1], " | ".join(cells[2:])))
    return page


def problems(modules: list[Module], page: Page, docs: dict[tuple[str, str], list[str]]) -> Iterator[str]:
    """What makes the page out of date. The first two kinds are what the test enforces."""
    live = {m.name: m for m in modules if m.deprecated is None}
    for module, rows in page.tables.items():
        if module not in live:
            yield f"the page has a table for {module}, which is not a public module"
            continue
        for row in rows:
            for name in row.names:
                if name not in live[module].names:
                    yield f"the page lists {module}.{name}, which is not in its __all__"
            if not row.why.strip("` "):
                yield f"{module}: the row of {', '.join(row.names)} gives no reason or link"
            if row.supported and not (live[module].user_facing and "](" in row.why):
                yield f"{module}: a supported row ({', '.join(row.names)}) must be user API and link its page"
        listed = [n for row in rows for n in row.names]
        for name in sorted({n for n in listed if listed.count(n) > 1}):
            yield f"the page lists {module}.{name} more than once"
    for module in live.values():
        for name in module.names:
            row = page.row_of(module.name, name)
            if module.user_facing and (module.name, name) not in docs and (row is None or row.supported):
                yield f"{module.name}.{name} is neither documented nor given a reason on the page"
            elif row is None:
                yield f"{module.name}.{name} is missing from the page"


def as_json(
    modules: list[Module],
    docs: dict[tuple[str, str], list[str]],
    used: dict[tuple[str, str], set[str]],
    page: Page,
) -> dict[str, object]:
    return {
        "modules": {
            m.name: {
                "user_facing": m.user_facing,
                "deprecated": m.deprecated,
                "names": {
                    n: {"docs": docs.get((m.name, n), []), "used_by": sorted(used.get((m.name, n), set()))}
                    for n in m.names
                },
            }
            for m in modules
        },
        "page": {
            module: [{"names": r.names, "status": r.status, "why": r.why} for r in rows]
            for module, rows in page.tables.items()
        },
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if the page is out of date")
    parser.add_argument("--counts", action="store_true", help="print the counts only")
    parser.add_argument("--json", action="store_true", help="print the modules and the page as JSON")
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT))
    modules = public_modules()
    docs, used, page = documentation(modules), importers(modules), read_page()
    if args.json:
        print(json.dumps(as_json(modules, docs, used, page), indent=1))
        return 0
    report(modules, docs, used, page, names=not (args.counts or args.check))
    if args.check:
        found = list(problems(modules, page, docs))
        for problem in found:
            print(f"  - {problem}")
        print(f"{len(found)} problem(s) with {PAGE.relative_to(ROOT)}" if found else "the page is up to date")
        return 1 if found else 0
    return 0


def report(
    modules: list[Module],
    docs: dict[tuple[str, str], list[str]],
    used: dict[tuple[str, str], set[str]],
    page: Page,
    *,
    names: bool,
) -> None:
    """Per module: how many names, how many documented, supported and given another reason on the
    page; with ``names``, a line per name (the pages that show it, its importers, its status)."""
    line = "{:<36} {:<11} {:>5} {:>10} {:>9} {:>6}"
    print(line.format("module", "kind", "names", "documented", "supported", "reason"))
    total = [0, 0, 0, 0]
    for module in modules:
        if module.deprecated:
            print(
                f"{module.name:<36} {'deprecated':<11} {len(module.names):>5}   ({module.deprecated[:60]}…)"
            )
            continue
        rows = [page.row_of(module.name, n) for n in module.names]
        counts = [
            len(module.names),
            sum((module.name, n) in docs for n in module.names),
            sum(r is not None and r.supported for r in rows),
            sum(r is not None and not r.supported for r in rows),
        ]
        total = [a + b for a, b in zip(total, counts, strict=True)]
        print(line.format(module.name, "user API" if module.user_facing else "internal", *counts))
        for name, row in zip(module.names, rows, strict=True) if names else ():
            shown = ", ".join(p.removeprefix("docs/") for p in docs.get((module.name, name), [])[:3])
            users = ", ".join(
                sorted(u.removeprefix("harness_run.") for u in used.get((module.name, name), ()))
            )
            status = "(not on the page)" if row is None else row.status
            print(f"    {name:<28} docs: {shown or '-'} | used by: {users or '-'} | page: {status}")
    print(line.format("total (without deprecated aliases)", "", *total))


if __name__ == "__main__":
    sys.exit(main())
