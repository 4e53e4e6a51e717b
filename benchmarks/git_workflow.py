"""What a session's git workflow costs, one labelled number per line.

    python benchmarks/git_workflow.py [--files 2000] [--changed 20] [--runs 3]

A bare repository with ``--files`` files on ``main`` is served from a file:// URL (no network; the
token path is the same environment variables either way):

- clone_ms: the workspace's clone of ``main`` (no branch);
- branch_from_base_ms: ``start_session(branch=..., base_branch="main")``'s clone: ``git ls-remote``
  for the branch, clone of the base, ``checkout -b``;
- commit_push_ms: after a turn that changed ``--changed`` files, ``git add -A``, the secret scan of
  the staged files, the commit and the push of the new branch (``git.commit="after_turn"``).

Medians of ``--runs``.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from harness_run.runtime.local._git import deliver  # noqa: E402
from harness_run.runtime.local._workspace import _clone  # noqa: E402  # pyright: ignore[reportPrivateUsage]
from harness_run.spec import GitOptions, GitRepo  # noqa: E402


def _git(cwd: Path, *args: str) -> None:
    subprocess.run(
        ["git", "-c", "user.name=b", "-c", "user.email=b@b", *args], cwd=cwd, check=True, capture_output=True
    )


def _bare(root: Path, files: int) -> Path:
    work = root / "work"
    for i in range(files):
        path = work / f"pkg{i % 40}" / f"mod{i}.py"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"VALUE = {i}\n" * 20)
    _git(work, "init", "-q", "-b", "main")
    _git(work, "add", "-A")
    _git(work, "commit", "-q", "-m", "init")
    bare = root / "app.git"
    _git(root, "clone", "-q", "--bare", str(work), str(bare))
    return bare


def _ms(start: float) -> float:
    return (time.perf_counter() - start) * 1000


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--files", type=int, default=2000)
    parser.add_argument("--changed", type=int, default=20)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="hr-bench-git-") as tmp:
        root = Path(tmp)
        repo = GitRepo(url=f"file://{_bare(root, args.files)}")
        options = GitOptions(commit="after_turn", push=True)
        clone, branch, push = [], [], []
        for run in range(args.runs):
            start = time.perf_counter()
            _clone(repo, root / f"plain{run}", {})
            clone.append(_ms(start))
            target = root / f"branch{run}"
            start = time.perf_counter()
            _clone(repo, target, {}, (f"feat/bench-{run}", "main"))
            branch.append(_ms(start))
            for i in range(args.changed):
                (target / f"pkg{i % 40}" / f"new{i}.py").write_text(f"NEW = {i}\n")
            start = time.perf_counter()
            done = deliver(
                target,
                repo,
                options,
                message="bench",
                branch=f"feat/bench-{run}",
                secrets={},
                forms=["not-there"],
            )
            push.append(_ms(start))
            if done.error is not None or done.pushed_ref is None:
                raise SystemExit(f"push failed: {done}")
    print(f"files {args.files}")
    print(f"clone_ms {statistics.median(clone):.1f}")
    print(f"branch_from_base_ms {statistics.median(branch):.1f}")
    print(f"commit_push_ms {statistics.median(push):.1f}")


if __name__ == "__main__":
    main()
