"""HarnessBox's README examples, run as written against harness-run.

``data/harnessbox-README.md`` is a verbatim copy of ``../shared/seeds/harnessbox-README.md`` (the
HarnessBox README our API matches). :func:`readme_blocks` extracts its ```python blocks per section
heading; :func:`adapt` substitutes only what points outside this machine — the import
(``harnessbox`` -> ``harness_run.harnessbox``), the provider, the model endpoint and key, the repo
URL (plus its token, the test git server needs one), the team server's address — and
:func:`run_block` executes the result with top-level ``await``, as the README's snippets are written.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path
from typing import Any

README = Path(__file__).parent / "data" / "harnessbox-README.md"

_BLOCK = re.compile(r"```python\n(.*?)```", re.S)


def readme_blocks() -> dict[str, list[str]]:
    """Section heading (``## x`` / ``### x``; the untitled top block is ``""``) -> its python blocks."""
    found: dict[str, list[str]] = {}
    heading = ""
    for chunk in re.split(r"(?m)^(#{2,3} .*)$", README.read_text()):
        if re.fullmatch(r"#{2,3} .*", chunk):
            heading = chunk.lstrip("#").strip()
            continue
        found.setdefault(heading, []).extend(m.group(1) for m in _BLOCK.finditer(chunk))
    return found


def adapt(source: str) -> str:
    """The README's code pointed at this machine (see the module docstring); nothing else changes."""
    out = source.replace("from harnessbox", "from harness_run.harnessbox")
    out = re.sub(r'provider="e2b"', "provider=PROVIDER", out)
    out = out.replace(
        '"harness_secrets": {"ANTHROPIC_API_KEY": os.getenv("ANTHROPIC_API_KEY")}',
        '"harness_secrets": MODEL_SECRETS',
    )
    out = out.replace("secrets={...}", 'secrets={"harness_secrets": MODEL_SECRETS}')
    out = re.sub(r'remote="https://github\.com/[^"]+",?', "remote=REMOTE, auth_token=REPO_TOKEN,", out)
    out = out.replace('base_url="http://localhost:8080"', "base_url=SERVER_URL")  # a served test server
    assert "e2b" not in out.replace("E2B_API_KEY", ""), out
    return out


async def run_block(source: str, namespace: dict[str, Any]) -> None:
    """Execute ``source`` (top-level ``await`` allowed) in ``namespace``."""
    code = compile(source, str(README), "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
    result = eval(code, namespace)
    if result is not None:
        await result
