"""The benchmark runner.

    python -m benchmarks                  list the benchmarks, one line each
    python -m benchmarks NAME [ARGS...]   run one (``NAME --help``: its options)
    python -m benchmarks results          write RESULTS.md from the recorded runs (results/*.json)
    python -m benchmarks charts           draw their charts into docs/benchmarks/*.svg

Every module of this folder whose name does not start with ``_`` is a benchmark — a ``NAME.py``, or
a package ``NAME/`` with a ``__main__.py`` — so a new file needs no registration here. It runs as a
script (``runpy``, ``__name__ == "__main__"``) with ``ARGS`` as its command line; the first line of
its docstring is its description. Run from the checkout's root (``make bench NAME=... ARGS=...``).
"""

from __future__ import annotations

import ast
import pkgutil
import runpy
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
COMMANDS = {
    "results": ("benchmarks._results", "write RESULTS.md from the recorded runs in results/*.json"),
    "charts": ("benchmarks._charts", "draw the recorded runs' charts into docs/benchmarks/*.svg"),
}


def benchmarks() -> dict[str, str]:
    """Each benchmark's name and the first line of its docstring (read, not imported)."""
    found: dict[str, str] = {}
    for info in pkgutil.iter_modules([str(HERE)]):
        if info.name.startswith("_") or info.name in COMMANDS:
            continue
        source = HERE / info.name / "__init__.py" if info.ispkg else HERE / f"{info.name}.py"
        doc = ast.get_docstring(ast.parse(source.read_text(encoding="utf-8"))) or ""
        first = doc.strip().splitlines()[0] if doc.strip() else "(no docstring)"
        found[info.name] = first.replace("``", "`")
    return dict(sorted(found.items()))


def listing() -> str:
    found = benchmarks()
    width = max(map(len, [*found, *COMMANDS]))
    lines = ["usage: python -m benchmarks NAME [ARGS...]   (NAME --help: its options)", "", "benchmarks:"]
    lines += [f"  {name:<{width}}  {about}" for name, about in found.items()]
    lines += ["", "also:"] + [f"  {name:<{width}}  {about}" for name, (_, about) in COMMANDS.items()]
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    if not argv or argv[0] in ("-h", "--help", "list"):
        print(listing())
        return 0
    name, *args = argv
    name = name.removeprefix("benchmarks/").removesuffix(".py").removesuffix("/")
    if name in COMMANDS:
        module = COMMANDS[name][0]
    elif name in benchmarks():
        module = f"benchmarks.{name}"
    else:
        print(f"no benchmark named {name!r}\n\n{listing()}", file=sys.stderr)
        return 2
    sys.argv = [f"benchmarks {name}", *args]
    # alter_sys: the module is __main__ while it runs (sys.modules, sys.argv[0]), as a script is
    runpy.run_module(module, run_name="__main__", alter_sys=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
