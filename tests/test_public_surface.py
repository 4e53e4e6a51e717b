"""The public surface is audited: docs/reference/public-surface.md says why each exported name is
there, so a new export of the user API cannot appear silently and the page cannot list a name that
is gone. ``scripts/public_surface.py`` gathers the facts (in a subprocess: it imports every public
module, heavy dependencies included)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "scripts" / "public_surface.py"
PAGE = "docs/reference/public-surface.md"


@pytest.fixture(scope="module")
def surface() -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--json"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout)


def _row(surface: dict[str, Any], module: str, name: str) -> dict[str, Any] | None:
    return next((r for r in surface["page"].get(module, []) if name in r["names"]), None)


def test_every_user_api_name_is_documented_or_given_a_reason(surface: dict[str, Any]) -> None:
    user_api = {m: info for m, info in surface["modules"].items() if info["user_facing"]}
    assert {"harness_run", "harness_run.spec", "harness_run.testing"} <= set(user_api)
    silent: list[str] = []
    for module, info in user_api.items():
        for name, facts in info["names"].items():
            row = _row(surface, module, name)
            reason = row is not None and row["status"] != "supported" and row["why"].strip()
            if not facts["docs"] and not reason:
                silent.append(f"{module}.{name}")
    assert not silent, (
        f"exported but neither documented nor given a reason in {PAGE}: {silent} "
        "(document them, add a row with a reason, or stop exporting them)"
    )


def test_every_name_on_the_page_is_still_exported(surface: dict[str, Any]) -> None:
    live = {m: info for m, info in surface["modules"].items() if info["deprecated"] is None}
    stale: list[str] = []
    for module, rows in surface["page"].items():
        exported = live.get(module, {"names": {}})["names"]
        stale += [f"{module}.{name}" for row in rows for name in row["names"] if name not in exported]
    assert surface["page"], f"no module tables found in {PAGE}"
    assert not stale, f"{PAGE} lists names that are not exported (any more): {stale}"


def test_supported_rows_are_user_api_and_link_their_documentation(surface: dict[str, Any]) -> None:
    wrong = [
        f"{module}: {', '.join(row['names'])}"
        for module, rows in surface["page"].items()
        for row in rows
        if row["status"] == "supported"
        and not (surface["modules"].get(module, {}).get("user_facing") and "](" in row["why"])
    ]
    assert not wrong, f"'supported' rows of {PAGE} must be in a user API module and link a page: {wrong}"
