"""Run a group of documentation examples in this (fresh) process: ``python _exec_blocks.py FILE.json``.

The JSON file lists ``{"path": ..., "line": ..., "code": ...}``. The blocks share one namespace and
one event loop, in order, as if typed into ``python -m asyncio``: top-level ``await`` works, and a
block may use the names (and the running turns) of the blocks before it. Line numbers in tracebacks
are the markdown file's.
"""

from __future__ import annotations

import ast
import asyncio
import inspect
import json
import sys


def main(spec_file: str) -> int:
    with open(spec_file, encoding="utf-8") as handle:
        blocks = json.load(handle)
    namespace: dict[str, object] = {"__name__": "__main__"}
    with asyncio.Runner() as runner:
        for block in blocks:
            source = "\n" * (block["line"] - 1) + block["code"]
            code = compile(source, block["path"], "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
            print(f"--- example {block['path']}:{block['line']}", flush=True)
            outcome = eval(code, namespace)  # the documentation's own examples
            if inspect.iscoroutine(outcome):
                runner.run(outcome)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
