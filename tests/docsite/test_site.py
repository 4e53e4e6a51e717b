"""The documentation site builds with ``mkdocs build --strict``: no broken link, anchor or API
reference, every page in the nav, and nothing fetched from the network at build time."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import yaml

from docsite.blocks import ROOT

MKDOCS = Path(sys.executable).parent / "mkdocs"


@pytest.mark.slow
def test_mkdocs_build_strict(tmp_path: Path) -> None:
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    done = subprocess.run(
        [str(MKDOCS), "build", "--strict", "--site-dir", str(tmp_path / "site")],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, (
        f"mkdocs build --strict failed:\n{done.stdout[-3000:]}\n{done.stderr[-6000:]}"
    )
    for page in ("index.html", "reference/spec/index.html", "troubleshooting/index.html"):
        assert (tmp_path / "site" / page).is_file(), page
    # the API reference is generated from the docstrings, not empty
    spec_page = (tmp_path / "site" / "reference" / "spec" / "index.html").read_text()
    assert 'id="harness_run.spec.AgentSpec"' in spec_page
    assert 'id="harness_run.spec.AgentSpec.max_budget_usd"' in spec_page


def _plugins(config: dict[str, object]) -> list[str]:
    names: list[str] = []
    for entry in config.get("plugins", []):  # type: ignore[union-attr]
        names.extend(entry if isinstance(entry, dict) else [entry])
    return names


def test_no_plugin_fetches_from_the_network() -> None:
    """Social cards and the privacy plugin download at build time; remote inventories too."""
    text = (ROOT / "mkdocs.yml").read_text()
    config = yaml.load(text, Loader=yaml.BaseLoader)  # our own file; every scalar as text
    assert not {"social", "privacy", "offline"} & set(_plugins(config))
    handlers = config["plugins"][1]["mkdocstrings"]["handlers"]  # type: ignore[index]
    assert "inventories" not in handlers["python"] and "import" not in handlers["python"]
    assert config["theme"]["font"] == "false"  # no web fonts loaded by the pages either


@pytest.mark.parametrize("page", sorted((ROOT / "docs" / "reference").glob("*.md")), ids=lambda p: p.name)
def test_reference_pages_list_every_public_name(page: Path) -> None:
    """A reference page that lists its members explicitly (for their order) must list all of the
    module's ``__all__``: a name added to the API must not be missing from the reference."""
    import importlib

    text = page.read_text()
    for match in re.finditer(r"^::: ([\w.]+)\n((?:    .*\n)*)", text, re.M):
        options = yaml.safe_load(textwrap.dedent(match.group(2))) or {}
        members = (options.get("options") or {}).get("members")
        if not isinstance(members, list):
            continue
        module = importlib.import_module(match.group(1))
        missing = sorted(set(module.__all__) - set(members))
        assert not missing, f"{page.name}: add {missing} to the members of ::: {match.group(1)}"
