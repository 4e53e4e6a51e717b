"""``harness-run validate | compile | schema`` as users run them: subprocesses, exit codes, no tracebacks."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from .conftest import REPO_ROOT

EXAMPLES = sorted((REPO_ROOT / "examples" / "specs").glob("*.yaml"))


def _run(*args: str | Path, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "HARNESS_RUN_DEBUG"}
    return subprocess.run(
        [sys.executable, "-m", "harness_run", *map(str, args)],
        capture_output=True,
        text=True,
        cwd=cwd,
        env=env,
        timeout=120,
    )


def test_examples_exist() -> None:
    assert len(EXAMPLES) >= 3


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_validate_examples(path: Path) -> None:
    result = _run("validate", path)
    assert result.returncode == 0, result.stderr
    name = yaml.safe_load(path.read_text())["name"]
    assert result.stdout.startswith(f"ok: {name} (")


def test_validate_bad_spec(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        "name: Repo_Fixer\nharness: codex\nmodel: gpt-5\nenv: {GH_TOKEN: abc}\nmcp_servers:\n"
        "  - name: s\n    url: https://x.example.com\n    headers: {Authorization: Bearer abc}\n"
    )
    result = _run("validate", bad)
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    for path in ("name:", "env.GH_TOKEN:", "mcp_servers[0].headers:"):
        assert path in result.stderr
    assert "fix:" in result.stderr
    assert str(bad) in result.stderr


def test_validate_missing_file_and_broken_yaml(tmp_path: Path) -> None:
    missing = _run("validate", tmp_path / "nope.yaml")
    assert missing.returncode == 2
    assert "not found" in missing.stderr
    assert "Traceback" not in missing.stderr
    broken = tmp_path / "broken.yaml"
    broken.write_text("name: [unclosed\n")
    result = _run("validate", broken)
    assert result.returncode == 2
    assert "not valid YAML" in result.stderr
    assert "Traceback" not in result.stderr


def test_compile_writes_context_manifests_digest(tmp_path: Path) -> None:
    spec = REPO_ROOT / "examples" / "specs" / "research-mcp.yaml"
    out = tmp_path / "out"
    result = _run(
        "compile",
        spec,
        "--out",
        out,
        "--runtime-class",
        "none",
        "--pool-size",
        "2",
        "--base-image",
        "harness-run/base:trixie",
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr
    digest = (out / "digest").read_text().strip()
    assert f"digest: {digest}" in result.stdout
    assert "compiled in" in result.stdout
    assert (out / "context" / "Dockerfile").read_text().count("FROM harness-run/base:trixie") == 1
    assert (out / "context" / "skills" / "summarize" / "SKILL.md").is_file()  # relative to the spec file
    docs = list(yaml.safe_load_all((out / "manifests.yaml").read_text()))
    pool = next(d for d in docs if d["kind"] == "SandboxWarmPool")
    assert pool["spec"]["replicas"] == 2
    template = next(d for d in docs if d["kind"] == "SandboxTemplate")
    assert "runtimeClassName" not in template["spec"]["podTemplate"]["spec"]
    again = _run(
        "compile",
        spec,
        "--out",
        tmp_path / "again",
        "--runtime-class",
        "none",
        "--pool-size",
        "2",
        "--base-image",
        "harness-run/base:trixie",
    )
    assert (tmp_path / "again" / "digest").read_text().strip() == digest, again.stderr


def test_compile_bad_ca_file(tmp_path: Path) -> None:
    spec = REPO_ROOT / "examples" / "specs" / "minimal-claude.yaml"
    result = _run("compile", spec, "--out", tmp_path, "--ca-file", tmp_path / "missing.pem")
    assert result.returncode == 2
    assert "cannot read CA file" in result.stderr
    assert "Traceback" not in result.stderr


def test_schema(tmp_path: Path) -> None:
    result = _run("schema")
    assert result.returncode == 0, result.stderr
    schema = json.loads(result.stdout)
    assert schema["title"] == "harness-run AgentSpec"
    assert {"name", "harness", "model"} <= set(schema["required"])
    assert result.stdout == json.dumps(schema, indent=2, sort_keys=True, ensure_ascii=False) + "\n"
    out = tmp_path / "schema.json"
    assert _run("schema", "--out", out).returncode == 0
    assert json.loads(out.read_text()) == schema
    jsonschema = pytest.importorskip("jsonschema")
    for path in EXAMPLES:  # the examples are valid against the exported schema too
        jsonschema.validate(yaml.safe_load(path.read_text()), schema)
