"""What a session's git workflow costs, one labelled number per line.

    python -m benchmarks git_workflow [--files 2000] [--changed 20] [--runs 3]

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
import time

from benchmarks._common import ms_since, repo_files, scratch, testkit
from harness_run.runtime.local._git import deliver
from harness_run.runtime.local._workspace import _clone  # pyright: ignore[reportPrivateUsage]
from harness_run.spec import GitOptions, GitRepo


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--files", type=int, default=2000)
    parser.add_argument("--changed", type=int, default=20)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    root = scratch("hr-bench-git-")
    bare = testkit("git_http").make_bare_repo(root, "app", repo_files(args.files))
    repo = GitRepo(url=f"file://{bare}")
    options = GitOptions(commit="after_turn", push=True)
    clone, branch, push = [], [], []
    for run in range(args.runs):
        start = time.perf_counter()
        _clone(repo, root / f"plain{run}", {})
        clone.append(ms_since(start))
        target = root / f"branch{run}"
        start = time.perf_counter()
        _clone(repo, target, {}, (f"feat/bench-{run}", "main"))
        branch.append(ms_since(start))
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
        push.append(ms_since(start))
        if done.error is not None or done.pushed_ref is None:
            raise SystemExit(f"push failed: {done}")
    print(f"files {args.files}")
    print(f"clone_ms {statistics.median(clone):.1f}")
    print(f"branch_from_base_ms {statistics.median(branch):.1f}")
    print(f"commit_push_ms {statistics.median(push):.1f}")


if __name__ == "__main__":
    main()
