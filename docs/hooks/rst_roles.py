"""mkdocs hook: drop the reStructuredText role prefixes (``:class:``, ``:func:`` …) that some
docstrings carry before a code span, so the API reference shows ``Reply`` rather than
``:class:`Reply```. The docstrings themselves stay as they are."""

from __future__ import annotations

import re
from typing import Any

_ROLE = re.compile(r":(?:py:)?(?:class|func|meth|mod|data|attr|exc|obj):(?=<code)")


def on_page_content(html: str, **_: Any) -> str:
    return _ROLE.sub("", html)
