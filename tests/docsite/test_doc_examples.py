"""Every Python example in README.md and docs/ runs, against the scripted model, as written.

Each group of blocks (see ``blocks.py`` for the ``<!-- example: ... -->`` directives) runs in a fresh
Python process with a prepared environment: a ``ScriptedModel`` started here, ``ANTHROPIC_*`` and
``OPENAI_*`` pointing at it (or ``OPENROUTER_*`` for ``provider=openrouter``), ``HARNESS_RUN_HOME`` and
the working directory in a temp dir, dummy values for the other secrets the examples read from the
environment, and git URLs of ``https://github.com/...`` rewritten to local repositories made here.
A group passes when its process exits 0 and no turn it ran ended in an error. Blocks marked ``skip``
are compiled and type-checked with pyright instead, and listed in the test report.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from docsite.blocks import ROOT, Group, collect
from harness_run.store import SqliteStore
from harness_run.testing import Rule, ScriptedModel, load_script, text

HERE = Path(__file__).resolve().parent
EXEC = HERE / "_exec_blocks.py"
BIN = Path(sys.executable).parent
GITHUB = re.compile(r"https://github\.com/([\w.-]+)/([\w.-]+?)(?:\.git)?[\"'/]")
DUMMY_SECRETS = {
    "GH_TOKEN": "docs-example-gh-token",
    "SEARCH_API_KEY": "docs-example-search-key",
    "DEPLOY_KEY": "docs-example-deploy-key",
}
_DROP = re.compile(r"^(ANTHROPIC_|OPENAI_|OPENROUTER_|CLAUDE_CODE_|CODEX_|GOOGLE_APPLICATION_)|(KEY|TOKEN)$")


def _groups() -> list[Group]:
    try:
        return collect()
    except ValueError:
        return []  # test_directives_are_well_formed fails with the reason


GROUPS = _groups()
RUNNABLE = [g for g in GROUPS if g.skip_reason is None]
NOT_RUN = [g for g in GROUPS if g.skip_reason is not None]


def test_directives_are_well_formed() -> None:
    collect()  # raises ValueError naming the file and line
    assert RUNNABLE, "no runnable Python example found in README.md and docs/"


# --- the prepared environment ---------------------------------------------------------------


def _git(*args: str, cwd: Path) -> None:
    env = {**os.environ, "GIT_AUTHOR_NAME": "docs", "GIT_AUTHOR_EMAIL": "docs@example.invalid"}
    env |= {"GIT_COMMITTER_NAME": "docs", "GIT_COMMITTER_EMAIL": "docs@example.invalid"}
    subprocess.run(["git", *args], cwd=cwd, env=env, check=True, capture_output=True)


@pytest.fixture(scope="module")
def git_mirrors(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Local stand-ins for the GitHub repositories the examples name (a skill and a small project
    each), and an XDG git config whose ``insteadOf`` rules send the URLs there."""
    root = tmp_path_factory.mktemp("git")
    repos = sorted({m.groups() for g in GROUPS for b in g.blocks for m in GITHUB.finditer(b.code)})
    rules = []
    for owner, name in repos:
        work = root / "work" / owner / name
        (work / "tests").mkdir(parents=True)
        (work / "SKILL.md").write_text(
            f"---\nname: {name}\ndescription: Example skill {name}.\n---\nBe brief.\n"
        )
        (work / "README.md").write_text(f"# {name}\n")
        (work / "tests" / "test_parser.py").write_text("def test_parser():\n    assert True\n")
        _git("init", "-q", "-b", "main", cwd=work)
        _git("add", ".", cwd=work)
        _git("commit", "-q", "-m", "init", cwd=work)
        bare = root / "mirror" / owner / f"{name}.git"
        bare.parent.mkdir(parents=True, exist_ok=True)
        _git("clone", "-q", "--bare", str(work), str(bare), cwd=root)
        rules.append(f'[url "file://{bare}"]\n\tinsteadOf = https://github.com/{owner}/{name}\n')
    config = root / "xdg" / "git" / "config"
    config.parent.mkdir(parents=True)
    config.write_text("".join(rules))
    return config.parent.parent


def _script_of(group: Group) -> ScriptedModel:
    if group.script is not None:
        return ScriptedModel(load_script(group.script))
    return ScriptedModel([Rule(reply=text("Done."), tool_result=None)])


def _env(group: Group, model: ScriptedModel, home: Path, xdg: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not _DROP.search(k)}
    env |= DUMMY_SECRETS
    env |= {"HARNESS_RUN_HOME": str(home), "XDG_CONFIG_HOME": str(xdg), "PYTHONUNBUFFERED": "1"}
    env["PATH"] = f"{BIN}{os.pathsep}{env.get('PATH', '')}"
    if group.provider == "openrouter":
        env |= {"OPENROUTER_API_KEY": "docs-example-openrouter-key", "OPENROUTER_BASE_URL": model.openai_url}
    else:
        env |= model.env_for("claude-code", api_key="docs-example-key")
        env |= model.env_for("codex", api_key="docs-example-key")
    return env


def _failed_turns(home: Path) -> list[str]:
    """Turns the example ran whose result is an error (the harness or the model failed)."""
    if not home.exists():
        return []
    store = SqliteStore(home)
    try:
        return [
            f"{session.engine} turn {turn.turn}: {turn.result.error or turn.result.stop_reason}"
            for session in store.list_sessions()
            for turn in store.list_turns(session.session_id)
            if turn.result is not None and turn.result.is_error
        ]
    finally:
        store.close()


# --- the tests ---------------------------------------------------------------------------------


@pytest.fixture
def workplace(tmp_path: Path) -> tuple[Path, Path]:
    home, cwd = tmp_path / "harness-run-home", tmp_path / "cwd"
    cwd.mkdir()
    return home, cwd


@pytest.mark.harness
@pytest.mark.parametrize("group", RUNNABLE, ids=lambda g: g.id)
def test_example_runs(group: Group, git_mirrors: Path, workplace: tuple[Path, Path]) -> None:
    home, cwd = workplace
    spec_file = cwd.parent / "blocks.json"
    spec_file.write_text(
        json.dumps([{"path": str(b.path), "line": b.line, "code": b.code} for b in group.blocks])
    )
    if group.is_pytest:  # a test module: pytest runs it, as a user's CI would
        (cwd / "test_doc_example.py").write_text(group.blocks[0].code)
        command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--rootdir", str(cwd)]
        command += ["-o", "asyncio_mode=auto", "-o", "asyncio_default_fixture_loop_scope=function"]
        command += ["test_doc_example.py"]
    else:
        command = [sys.executable, str(EXEC), str(spec_file)]
    with _script_of(group) as model:
        done = subprocess.run(
            command,
            cwd=cwd,
            env=_env(group, model, home, git_mirrors),
            capture_output=True,
            text=True,
            timeout=240,
            check=False,
        )
    output = f"--- stdout ---\n{done.stdout[-4000:]}\n--- stderr ---\n{done.stderr[-6000:]}"
    print(output)  # shown with `pytest -rP`
    assert done.returncode == 0, f"the example at {group.id} failed (exit {done.returncode})\n{output}"
    failed = [] if group.allows_errors else _failed_turns(home)
    assert not failed, f"the example at {group.id} ran turns that failed: {failed}\n{output}"


@pytest.mark.slow
def test_examples_not_run_compile_and_type_check(tmp_path: Path) -> None:
    """Blocks that cannot run here (a GKE cluster, …) still have to match the API: pyright checks
    each, wrapped in an async function, against the installed package."""
    if not NOT_RUN:
        return
    for index, group in enumerate(NOT_RUN):
        body = "".join(b.code for b in group.blocks)
        module = f"# {group.id}: {group.skip_reason}\nasync def _example() -> None:\n"
        (tmp_path / f"example_{index}.py").write_text(module + textwrap.indent(body, "    ") + "    pass\n")
    (tmp_path / "pyrightconfig.json").write_text(
        json.dumps({"typeCheckingMode": "basic", "pythonVersion": "3.12", "reportUnusedCoroutine": "none"})
    )
    done = subprocess.run(
        [str(BIN / "pyright"), "--pythonpath", sys.executable, "--outputjson"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    report = json.loads(done.stdout or "{}")
    problems = []
    for diagnostic in report.get("generalDiagnostics", []):
        if diagnostic.get("severity") != "error":
            continue
        first = NOT_RUN[int(Path(diagnostic["file"]).stem.split("_")[1])].blocks[0]
        line = first.line + diagnostic["range"]["start"]["line"] - 2  # 2 lines of wrapper header
        problems.append(f"{first.path.relative_to(ROOT)}:{line}: {diagnostic['message']}")
    assert done.returncode == 0 and not problems, "\n".join(problems) or done.stdout[-4000:] + done.stderr


def test_root_is_the_repository() -> None:
    assert (ROOT / "mkdocs.yml").is_file()
