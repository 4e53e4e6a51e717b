"""The Python examples of the documentation: found in ``docs/**/*.md`` and ``README.md``, grouped, and
checked for well-formed directives.

Every fenced ``python`` block is an example that the test suite runs (``test_doc_examples.py``). An
HTML comment on the line before a block changes how it is run; it is invisible on the rendered page::

    <!-- example: skip="needs a GKE cluster" -->   not run: compiled and type-checked only, and listed
                                                    in the test report with its reason
    <!-- example: continue -->                      runs in the same process and namespace as the
                                                    block before it on the page (a fragment that
                                                    uses its names); skipped with it if that is
    <!-- example: script=structured-review -->      the scripted model answers from
                                                    tests/docsite/scripts/structured-review.yaml
                                                    (default: "Done." to every request)
    <!-- example: provider=openrouter -->           only OPENROUTER_API_KEY/OPENROUTER_BASE_URL point
                                                    at the scripted model (default: the Anthropic and
                                                    OpenAI variables do)
    <!-- example: pytest -->                        the block is a pytest test module: run with pytest
                                                    (and pytest-asyncio), it must pass
    <!-- example: allow-errors -->                  turns that end in an error are expected (by
                                                    default a failed turn fails the example)

Options combine: ``<!-- example: continue script=x -->``. A group (a block and the blocks that
continue it) takes its script and provider from its first block.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["ROOT", "Block", "Group", "collect", "doc_files"]

ROOT = Path(__file__).resolve().parents[2]
SCRIPTS = Path(__file__).resolve().parent / "scripts"

_FENCE = re.compile(r"^(?P<indent>[ \t]*)(?P<fence>`{3,}|~{3,})\s*(?P<info>[^`\s]*)")
_DIRECTIVE = re.compile(r"^\s*<!--\s*example:(?P<body>.*?)-->\s*$")
_OPTIONS = {"skip", "continue", "script", "provider", "pytest", "allow-errors"}
_PROVIDERS = {"direct", "openrouter"}


@dataclass
class Block:
    """One fenced Python block: where it is, its code (dedented), and its directive options."""

    path: Path
    line: int  # 1-based line of the first code line (the one after the opening fence)
    code: str
    options: dict[str, str] = field(default_factory=dict[str, str])

    @property
    def where(self) -> str:
        return f"{self.path.relative_to(ROOT)}:{self.line}"

    @property
    def skip_reason(self) -> str | None:
        return self.options.get("skip")


@dataclass
class Group:
    """Blocks run together in one process: a block and the ``continue`` blocks after it."""

    blocks: list[Block]

    @property
    def id(self) -> str:
        return self.blocks[0].where

    @property
    def script(self) -> Path | None:
        name = self.blocks[0].options.get("script")
        return SCRIPTS / f"{name}.yaml" if name else None

    @property
    def provider(self) -> str:
        return self.blocks[0].options.get("provider", "direct")

    @property
    def skip_reason(self) -> str | None:
        return self.blocks[0].skip_reason

    @property
    def allows_errors(self) -> bool:
        return any("allow-errors" in b.options for b in self.blocks)

    @property
    def is_pytest(self) -> bool:
        return "pytest" in self.blocks[0].options


def doc_files() -> list[Path]:
    """README.md and every page under docs/."""
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def _parse_directive(text: str, where: str) -> dict[str, str]:
    options: dict[str, str] = {}
    for word in shlex.split(text):
        key, _, value = word.partition("=")
        if key not in _OPTIONS:
            raise ValueError(f"{where}: unknown example option {key!r} (known: {sorted(_OPTIONS)})")
        options[key] = value
    if "skip" in options and not options["skip"].strip():
        raise ValueError(f'{where}: skip needs a reason: <!-- example: skip="why it cannot run here" -->')
    if options.get("provider", "direct") not in _PROVIDERS:
        raise ValueError(f"{where}: provider must be one of {sorted(_PROVIDERS)}")
    if "script" in options and not (SCRIPTS / f"{options['script']}.yaml").is_file():
        raise ValueError(f"{where}: no script {options['script']!r} in {SCRIPTS.relative_to(ROOT)}")
    return options


def blocks_of(path: Path) -> list[Block]:
    """The Python blocks of one markdown file, with their directives."""
    lines = path.read_text(encoding="utf-8").splitlines()
    blocks: list[Block] = []
    pending: tuple[int, dict[str, str]] | None = None  # a directive waiting for its block
    index = 0
    while index < len(lines):
        line = lines[index]
        where = f"{path.relative_to(ROOT)}:{index + 1}"
        directive = _DIRECTIVE.match(line)
        if directive:
            if pending is not None:
                raise ValueError(f"{where}: two example directives in a row")
            pending = (index, _parse_directive(directive.group("body"), where))
            index += 1
            continue
        fence = _FENCE.match(line)
        if fence is None:
            if line.strip() and pending is not None:
                raise ValueError(f"{where}: an example directive must be right before a ```python block")
            index += 1
            continue
        indent, marker, info = fence.group("indent"), fence.group("fence"), fence.group("info").lower()
        end = index + 1
        while end < len(lines) and not lines[end].strip().startswith(marker):
            end += 1
        body = [
            text[len(indent) :] if text.startswith(indent) else text.lstrip()
            for text in lines[index + 1 : end]
        ]
        if info in {"python", "py"}:
            options = pending[1] if pending is not None else {}
            blocks.append(Block(path, index + 2, "\n".join(body) + "\n", options))
        elif pending is not None:
            raise ValueError(f"{where}: an example directive must be right before a ```python block")
        pending = None
        index = end + 1
    if pending is not None:
        raise ValueError(f"{path.relative_to(ROOT)}:{pending[0] + 1}: an example directive with no block")
    return blocks


def collect() -> list[Group]:
    """Every example group of the documentation, in page order."""
    groups: list[Group] = []
    for path in doc_files():
        for block in blocks_of(path):
            if "continue" in block.options:
                if not groups or groups[-1].blocks[0].path != path:
                    raise ValueError(f"{block.where}: 'continue' needs an earlier block on the same page")
                previous = groups[-1]
                if block.skip_reason is not None and previous.skip_reason is None:
                    raise ValueError(f"{block.where}: skip the whole group (its first block) or none of it")
                for key in ("script", "provider", "pytest"):
                    if key in block.options:
                        raise ValueError(f"{block.where}: {key}= belongs on the group's first block")
                previous.blocks.append(block)
            else:
                groups.append(Group([block]))
    return groups
