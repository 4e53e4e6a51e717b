"""The architecture holds: layers point down, no package reaches into another's private modules,
the package type-checks strictly, and test infrastructure stays out of the installed package.

These run the same tools as ``make lint`` so that CI (which runs the test command) enforces them too.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
PACKAGE = REPO / "harness_run"


def _run(*argv: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=timeout, check=False)


def test_import_contracts_are_kept() -> None:
    proc = _run(str(BIN / "lint-imports"), "--no-cache")
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    assert "0 broken" in proc.stdout


@pytest.mark.slow
def test_pyright_strict_is_clean() -> None:
    proc = _run(str(BIN / "pyright"), "--outputjson")
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-2000:]


def test_ruff_is_clean() -> None:
    check = _run(str(BIN / "ruff"), "check", ".")
    assert check.returncode == 0, check.stdout[-4000:]
    fmt = _run(str(BIN / "ruff"), "format", "--check", ".")
    assert fmt.returncode == 0, fmt.stdout[-4000:]


def test_no_module_over_600_lines() -> None:
    long = {
        str(path.relative_to(REPO)): n
        for path in PACKAGE.rglob("*.py")
        if (n := len(path.read_text().splitlines())) > 600
    }
    assert not long, f"split these modules (cap ~600 lines): {long}"


def test_spawn_first_imports_only_the_standard_library() -> None:
    """``harness_run._launch`` is what a fresh ``harness-run run`` imports to spawn the harness before
    asyncio or pydantic: importing it loads the standard library and itself, nothing else of
    ``harness_run`` (beyond the root package) and no third-party module; its ``adopt`` (asyncio)
    loads on first use."""
    code = (
        "import json, sys\n"
        "start = set(sys.modules)\n"
        "import harness_run\n"
        "root = set(sys.modules)\n"
        "import harness_run._launch\n"
        "end = set(sys.modules)\n"
        "print(json.dumps([sorted(root - start), sorted(end - root), sorted(sys.stdlib_module_names)]))\n"
    )
    proc = _run(sys.executable, "-c", code, timeout=120)
    assert proc.returncode == 0, proc.stderr
    by_root, by_launch, stdlib = json.loads(proc.stdout)
    third_party = [m for m in by_root + by_launch if m.split(".")[0] not in {*stdlib, "harness_run"}]
    assert not third_party
    ours = [m for m in by_launch if m.split(".")[0] not in stdlib]
    assert ours and all(m.split(".")[:2] == ["harness_run", "_launch"] for m in ours), ours
    assert "asyncio" not in by_root + by_launch
    # and what the root package loaded already: no module of the package imports it
    for path in (PACKAGE / "_launch").glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = (
                [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else [node.module or ""]
                if isinstance(node, ast.ImportFrom) and not node.level
                else []
            )
            others = [n for n in names if n.split(".")[0] not in sys.stdlib_module_names]
            assert all(n.startswith("harness_run._launch") for n in others), f"{path.name} imports {others}"


def test_test_infrastructure_is_not_in_the_package() -> None:
    """The Kubernetes API emulator (kmock) lives in tests/testkit; nothing installed imports it."""
    offenders = []
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = (
                [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else [node.module or ""]
                if isinstance(node, ast.ImportFrom)
                else []
            )
            offenders += [
                f"{path.relative_to(REPO)}: {n}" for n in names if n.split(".")[0] in {"kmock", "testkit"}
            ]
    assert not offenders
    assert not (PACKAGE / "testing" / "cluster").exists()


def test_init_modules_only_import() -> None:
    """Every package ``__init__`` is import-only: a docstring, imports (also under
    ``if TYPE_CHECKING:``), ``__all__`` (and a lookup function where a package picks an
    implementation by name, or a lazy ``__getattr__`` with its ``_LAZY`` table)."""
    for init in PACKAGE.rglob("__init__.py"):
        tree = ast.parse(init.read_text())
        for node in tree.body:
            ok = isinstance(node, ast.Import | ast.ImportFrom | ast.FunctionDef) or (
                isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)
            )
            ok = ok or (
                isinstance(node, ast.Assign | ast.AnnAssign | ast.AugAssign)
                and any(isinstance(t, ast.Name) and t.id in ("__all__", "_LAZY") for t in _targets(node))
            )
            ok = ok or (
                isinstance(node, ast.If)
                and isinstance(node.test, ast.Name)
                and node.test.id == "TYPE_CHECKING"
            )
            assert ok, f"{init.relative_to(REPO)}:{node.lineno}: only imports and __all__ belong here"


def _targets(node: ast.Assign | ast.AnnAssign | ast.AugAssign) -> list[ast.expr]:
    return list(node.targets) if isinstance(node, ast.Assign) else [node.target]
