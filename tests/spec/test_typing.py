"""Users' code type-checks: pyright (strict) on the seed README's forms, and on mistakes it must catch.

The spec models accept shorthands at runtime (a list for a tuple field, ``system_prompt="..."``,
``network="none"``, ``Secret("NAME", required=False)``); their ``__init__`` signatures for type
checkers say so. The second file proves the constructors are really checked (not typed as ``Any``).
"""

from __future__ import annotations

import ast
import inspect
import json
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from harness_run.spec import AgentSpec, Network, Resources, Secret, SessionConfig, StdioMcpServer, TurnConfig

USER_CODE = """
import os

from pydantic import BaseModel

from harness_run import AgentSpec, McpServer, RepoSource, Secret, SkillSource, SystemPrompt
from harness_run.spec import Network, Resources, SessionConfig, TurnConfig


class Result(BaseModel):
    summary: str


spec = AgentSpec(
    name="code-agent",
    harness="codex",
    model="gpt-5.6-luna",
    checkpoint=True,
)

fixer = AgentSpec(
    name="repo-fixer",
    harness="codex",
    model="gpt-5.6-luna",
    system_prompt=SystemPrompt.inherit(append="Keep changes small and add tests."),
    skills=[SkillSource.git("https://github.com/zytedata/codex-skills"), SkillSource.local("skills/pdf")],
    repos=[RepoSource.git("https://github.com/acme/some-repo", ref="main", auth="GH_TOKEN")],
    mcp_servers=[
        McpServer.github(),
        McpServer.remote(
            "search",
            "https://mcp.example.com",
            header_secrets={"Authorization": "SEARCH_AUTH"},
        ),
        McpServer.stdio("db", "npx", ["-y", "@acme/db-mcp"], env_secrets={"DATABASE_URL": "DB_URL"}),
    ],
    packages=["httpx", "beautifulsoup4"],
    secrets=["PLAIN", Secret("OPTIONAL", required=False), Secret("GH_TOKEN", expose=True)],
    env={"LOG_LEVEL": "info"},
    allowed_tools=["Read", "Edit"],
    output_schema=Result,
    timeout="30m",
    network=["pypi.org"],
    resources=Resources(cpu="2", memory="4Gi"),
    checkpoint=True,
)
other = AgentSpec(
    name="b",
    harness="claude-code",
    model="claude-sonnet-4-6",
    system_prompt="You fix bugs.",
    network="none",
    output_schema={"type": "object"},
)
locked = Network(egress="allowlist", allow_hosts=["pypi.org"])
session = SessionConfig(harness="codex", model="gpt-5", allowed_tools=["Read"], timeout="2m")
turn = TurnConfig(max_turns=3, system_prompt="Be brief.", output_schema=Result)
secret = Secret("X", required=False)
names: tuple[str, ...] = fixer.secret_names
skills_count: int = len(fixer.skills)
first_repo_url: str = fixer.repos[0].url
token = os.environ.get("GH_TOKEN", "")
"""

# Each line must be reported (the constructors are checked, not typed as Any).
MISTAKES = [
    'AgentSpec(name="a", harness="cursor", model="x")',
    'AgentSpec(name="a", model="x")',
    'AgentSpec(name="a", harness="codex", model="x", max_turns="3")',
    'AgentSpec(name="a", harness="codex", model="x", unknown=1)',
    'Secret("A", "B")',
    'Secret(name="A", required="no")',
    'TurnConfig(harness="codex")',
    'SessionConfig(max_turns="many")',
]


def _pyright(tmp_path: Path, files: dict[str, str]) -> list[dict[str, Any]]:
    pyright = Path(sys.executable).with_name("pyright")
    if not pyright.exists():
        pytest.skip("pyright is not installed in this environment")
    venv = Path(sys.prefix)
    config = {
        "typeCheckingMode": "strict",
        "pythonVersion": "3.12",
        "venvPath": str(venv.parent),
        "venv": venv.name,
        "reportUnusedVariable": False,
        "reportUnusedExpression": False,
    }
    (tmp_path / "pyrightconfig.json").write_text(json.dumps(config))
    for name, text in files.items():
        (tmp_path / name).write_text(textwrap.dedent(text))
    out = subprocess.run(
        [str(pyright), "--outputjson", *files],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=False,
        timeout=240,
    )
    try:
        report = json.loads(out.stdout)
    except json.JSONDecodeError:
        raise AssertionError(f"pyright did not report: {out.stdout}\n{out.stderr}") from None
    return [d for d in report["generalDiagnostics"] if d["severity"] == "error"]


@pytest.mark.slow
def test_user_code_type_checks_and_mistakes_are_caught(tmp_path: Path) -> None:
    header = (
        "from harness_run import AgentSpec, Secret\nfrom harness_run.spec import SessionConfig, TurnConfig\n"
    )
    bad = header + "".join(f"{line}\n" for line in MISTAKES)
    errors = _pyright(tmp_path, {"user.py": USER_CODE, "mistakes.py": bad})
    in_user = [
        f"{e['range']['start']['line'] + 1}: {e['message']}" for e in errors if e["file"].endswith("user.py")
    ]
    assert not in_user, "pyright (strict) errors in user-style code:\n" + "\n".join(in_user)
    flagged = {e["range"]["start"]["line"] for e in errors if e["file"].endswith("mistakes.py")}
    missed = [line for index, line in enumerate(MISTAKES, start=2) if index not in flagged]
    assert not missed, f"pyright accepted: {missed}"


def test_user_code_runs() -> None:
    """The same code is valid at runtime too (the typed signatures do not promise too much)."""
    namespace: dict[str, Any] = {}
    exec(compile(USER_CODE, "user.py", "exec"), namespace)
    assert namespace["fixer"].secret_names[:3] == ("PLAIN", "OPTIONAL", "GH_TOKEN")
    assert namespace["secret"] == Secret(name="X", required=False)


@pytest.mark.parametrize(
    "cls", [AgentSpec, SessionConfig, TurnConfig, Secret, Network, Resources, StdioMcpServer]
)
def test_typed_signatures_list_every_field(cls: type[Any]) -> None:
    """The ``__init__`` written for type checkers (under ``if TYPE_CHECKING``) names every field."""
    tree = ast.parse(textwrap.dedent(inspect.getsource(cls)))
    inits = [
        statement
        for block in ast.walk(tree)
        if isinstance(block, ast.If) and isinstance(block.test, ast.Name) and block.test.id == "TYPE_CHECKING"
        for statement in block.body
        if isinstance(statement, ast.FunctionDef) and statement.name == "__init__"
    ]
    assert len(inits) == 1, f"{cls.__name__} has no typed __init__ under TYPE_CHECKING"
    args = inits[0].args
    params = {a.arg for a in (*args.posonlyargs, *args.args, *args.kwonlyargs)} - {"self"}
    assert params == set(cls.model_fields)
