"""One version per harness everywhere: the local runtime runs the same Claude Code, Codex and OpenCode
release the images bake (``vocab/pins.py``), so a spec behaves the same on every runtime.

The image side is checked against the real binaries in tests/compiler/test_image.py (``--version``
inside the built image equals the local binary's); this file checks the declarations without Docker:
pyproject's ``local`` extra, ``scripts/bootstrap``, the OpenCode driver, the install lines in the docs,
and the Codex binary the local runtime locates (``opencode --version`` takes ~2 s: `harness-run doctor`
and the image test check that one).
"""

from __future__ import annotations

import re
import subprocess
import tomllib
from pathlib import Path

from packaging.requirements import Requirement

from harness_run.harness import get_driver
from harness_run.harness import opencode as opencode_driver
from harness_run.vocab import pins

ROOT = Path(__file__).resolve().parent.parent
DOCS = [ROOT / "README.md", ROOT / "DESIGN.md", *sorted((ROOT / "docs").rglob("*.md"))]


def _local_extra() -> dict[str, str]:
    """pyproject's ``local`` extra as {name: exact version}."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    out: dict[str, str] = {}
    for line in project["optional-dependencies"]["local"]:
        req = Requirement(line)
        exact = [s.version for s in req.specifier if s.operator == "=="]
        if exact:
            out[req.name.lower()] = exact[0]
    return out


def _binary_version(harness: str) -> str:
    binary = get_driver(harness).locate()
    env = {"HOME": "/tmp", "PATH": "/usr/bin:/bin"}
    return subprocess.run([binary, "--version"], capture_output=True, text=True, env=env, check=True).stdout


def test_claude_code_locally_is_the_claude_agent_sdk_wheel_the_image_installs() -> None:
    pinned = Requirement(pins.CLAUDE_AGENT_SDK)
    assert pins.HARNESS_CLI_PINS["claude-code"] == pins.CLAUDE_AGENT_SDK
    assert _local_extra()["claude-agent-sdk"] == next(iter(pinned.specifier)).version


def test_codex_locally_is_the_release_the_image_installs_from_npm() -> None:
    assert _local_extra()["openai-codex-cli-bin"] == pins.CODEX_VERSION
    assert pins.HARNESS_CLI_PINS["codex"] == f"@openai/codex@{pins.CODEX_VERSION}"
    assert _binary_version("codex").split() == ["codex-cli", pins.CODEX_VERSION]


def test_opencode_from_bootstrap_and_the_driver_is_the_release_the_image_installs() -> None:
    assert pins.HARNESS_CLI_PINS["opencode"] == f"opencode-ai@{pins.OPENCODE_VERSION}"
    assert opencode_driver.VERSION == pins.OPENCODE_VERSION
    bootstrap = re.findall(r"^OPENCODE_VERSION=(\S+)", (ROOT / "scripts" / "bootstrap").read_text(), re.M)
    assert bootstrap == [pins.OPENCODE_VERSION]


def test_every_install_line_in_the_docs_names_the_pinned_release() -> None:
    claude_sdk = next(iter(Requirement(pins.CLAUDE_AGENT_SDK).specifier)).version
    expected = {
        r"opencode-ai@([\w.]+)": pins.OPENCODE_VERSION,
        r"@openai/codex@([\w.]+)": pins.CODEX_VERSION,
        r"openai-codex-cli-bin==([\w.]+)": pins.CODEX_VERSION,
        r"claude-agent-sdk==([\w.]+)": claude_sdk,
    }
    wrong = [
        f"{doc.relative_to(ROOT)}: {match.group(0)} (pinned: {version})"
        for doc in DOCS
        for pattern, version in expected.items()
        for match in re.finditer(pattern, doc.read_text())
        if match.group(1).rstrip(".") != version
    ]
    assert not wrong, wrong


def test_every_harness_has_one_default_model_that_is_priced_and_valid() -> None:
    from harness_run import AgentSpec
    from harness_run.vocab.models import DEFAULT_MODELS
    from harness_run.vocab.pricing import rates

    assert sorted(DEFAULT_MODELS) == sorted(pins.HARNESS_CLI_PINS)
    for harness, model in DEFAULT_MODELS.items():
        assert rates(model) is not None, f"{harness}'s default model {model} has no price: budgets would fail"
        AgentSpec.from_dict({"name": "defaults", "harness": harness, "model": model})
