"""Branch pooling: a session's start on an idle workspace taken over, against a fresh clone.

A session on a (remote, branch) whose idle workspace is taken over, vs a fresh clone — the repository (``--files`` files, 2,000 by default) served by a real git smart-HTTP
server on 127.0.0.1 with token auth (``git http-backend``, as in the tests).

Two measures, one labelled number per line, medians of ``--runs``:

- workspace step alone (no CLI): ``clone_ms`` (what a new session's first turn does: ``ls-remote``
  for the branch, clone of the base, ``checkout -b``) vs ``pooled_ms`` (take the idle workspace
  over: lock, clean/pushed checks, rename, then ``fetch`` + ``reset --hard`` + ``clean``);
- a whole first turn of a new session with the real ``claude`` on the scripted model, from
  ``session.run()`` to its ``started`` event (``*_start_ms``: workspace + CLI start) and to the
  result (``*_turn_ms``).

With ``--container`` the whole-turn measure runs on the container runtime too (each session in its
own container of the compiled image; needs DOCKER_HOST, the base image and PIP_CERT, as the docker
tests): there the pooled workspace is taken over from another session's container. With
``--sandbox`` it runs on the sandbox runtime of the test cluster too (Kubernetes API emulator, test
controller, fake-gcs-server, the local registry: HARNESS_RUN_TEST_REGISTRY as well): there the
pooled session takes over the earlier session's sandbox and its checkout; the fresh one claims a
warm sandbox and clones.

    python -m benchmarks workspace_pool [--files 2000] [--runs 3] [--smoke] [--container] [--sandbox]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import shutil
import statistics
import time
import uuid
from typing import Any

from benchmarks._common import MODEL, model_secrets, ms_since, repo_files, scratch, scripted_model, testkit
from benchmarks._services import (
    bench_labels,
    docker_env,
    fake_gcs,
    gcs_store,
    sandbox_cluster,
    sandbox_deploy,
)
from harness_run import AgentSpec, RepoSource, local
from harness_run.events import SetupEvent
from harness_run.runtime.local import SessionPaths
from harness_run.runtime.local._pool import pool_key, refresh_repo, take_idle_workspace
from harness_run.runtime.local._workspace import _clone  # pyright: ignore[reportPrivateUsage]


def workspace_step(url: str, token: str, runs: int) -> tuple[list[float], list[float]]:
    """The workspace step alone: a clone of a new branch from main vs taking an idle one over."""
    spec = AgentSpec(
        name="bench-pool", harness="claude-code", model=MODEL, repos=[RepoSource.git(url, auth="T")]
    )
    repo, secrets = spec.repos[0], {"T": token}
    workdir = scratch("step-")
    clone, pooled = [], []
    for run in range(runs):
        branch = (f"feat/step-{run}", "main")
        donor = SessionPaths(workdir / "sessions" / str(uuid.uuid4()))
        donor.create()
        start = time.perf_counter()
        _clone(repo, donor.workspace / repo.dir_name, secrets, branch)
        clone.append(ms_since(start))
        donor.pool_key.write_text(pool_key(spec.name, spec, branch[0]) + "\n")
        taker = SessionPaths(workdir / "sessions" / str(uuid.uuid4()))
        start = time.perf_counter()
        key = pool_key(spec.name, spec, branch[0])
        taken = take_idle_workspace(workdir, key, taker, spec, secrets, lambda _sid: None, 0.0)
        if taken is None:
            raise SystemExit("the idle workspace was not taken over")
        refresh_repo(taker.workspace / repo.dir_name, repo, secrets, branch)
        pooled.append(ms_since(start))
        shutil.rmtree(taker.root)
    return clone, pooled


def _sandbox_engine(spec: AgentSpec, stack: contextlib.ExitStack) -> Any:
    """``spec`` deployed on the test cluster (torn down with ``stack``), lending at once."""
    from harness_run import sandbox

    docker = docker_env("--sandbox", ca=True, registry=True)
    gcs = stack.enter_context(fake_gcs())
    cluster = stack.enter_context(sandbox_cluster(docker, gcs, bench_labels()))
    claims = sandbox.ClaimOptions(idle_ttl=600.0, pool_after=0.0)
    return sandbox_deploy(spec, cluster, docker, gcs_store(gcs), claims)


async def first_turns(
    url: str, token: str, model_url: str, runs: int, runtime: str = "local"
) -> dict[str, list[float]]:
    """Whole first turns of new sessions: fresh clone vs a taken-over idle workspace."""
    spec = AgentSpec(
        name="bench-pool",
        harness="claude-code",
        model=MODEL,
        repos=[RepoSource.git(url, auth="T")],
        checkpoint=runtime == "sandbox",
    )
    secrets = {**model_secrets(model_url), "T": token}
    out: dict[str, list[float]] = {
        k: [] for k in ("fresh_start", "fresh_turn", "pooled_start", "pooled_turn")
    }
    with contextlib.ExitStack() as stack:
        if runtime == "sandbox":
            engine = _sandbox_engine(spec, stack)
        else:
            options = (
                docker_env("--container", ca=True).engine_options(idle_ttl=600.0)
                if runtime == "container"
                else {}
            )
            engine = local.deploy(spec, workdir=scratch("turns-"), pool_after=0, **options)  # pyright: ignore[reportArgumentType]
        await _turns(engine, runs, secrets, out)
    return out


async def _turns(engine: Any, runs: int, secrets: dict[str, str], out: dict[str, list[float]]) -> None:
    async with engine:
        for run in range(runs):
            for kind in ("fresh", "pooled"):
                session = engine.start_session(branch=f"feat/turn-{run}", base_branch="main")
                start = time.perf_counter()
                started: float | None = None
                turn = session.run("go", secrets=secrets)
                async for event in turn:
                    if event.type == "started" and started is None:
                        started = ms_since(start)
                result = await turn
                total = ms_since(start)
                if result.is_error:
                    raise SystemExit(f"turn failed: {result.error}")
                steps = [e.step for e in session.events() if isinstance(e, SetupEvent)]
                expected = "cloning" if kind == "fresh" else "reusing the idle workspace"
                if not any(s.startswith(expected) for s in steps):
                    raise SystemExit(f"{kind} turn did not {expected!r}: {steps}")
                out[f"{kind}_start"].append(started or total)
                out[f"{kind}_turn"].append(total)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--files", type=int, default=2000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--smoke", action="store_true", help="200 files, one run")
    parser.add_argument("--container", action="store_true", help="also whole turns on the container runtime")
    parser.add_argument(
        "--sandbox", action="store_true", help="also whole turns on the test cluster's sandboxes"
    )
    args = parser.parse_args()
    files, runs = (200, 1) if args.smoke else (args.files, args.runs)
    token = f"bench-{uuid.uuid4().hex[:12]}"
    served = scratch("srv-")
    git_http = testkit("git_http")
    git_http.make_bare_repo(served, "app", {**repo_files(files), "README.md": "bench\n"})
    with git_http.GitHttpServer(served, token) as server:
        url = f"{server.url}/app.git"
        clone, pooled = workspace_step(url, token, runs)
        with scripted_model() as model_url:
            turns = asyncio.run(first_turns(url, token, model_url, runs))
            boxed = (
                asyncio.run(first_turns(url, token, model_url, runs, "container")) if args.container else None
            )
            claimed = (
                asyncio.run(first_turns(url, token, model_url, runs, "sandbox")) if args.sandbox else None
            )
    med = statistics.median
    print(f"files {files}")
    print(f"runs {runs}")
    print(f"clone_ms {med(clone):.1f}")
    print(f"pooled_ms {med(pooled):.1f}")
    print(f"ratio clone / pooled: {med(clone) / med(pooled):.1f}")
    for kind in ("fresh", "pooled"):
        print(f"{kind}_start_ms {med(turns[f'{kind}_start']):.1f}")
        print(f"{kind}_turn_ms {med(turns[f'{kind}_turn']):.1f}")
    print(f"ratio start fresh / pooled: {med(turns['fresh_start']) / med(turns['pooled_start']):.1f}")
    if boxed is not None:
        for kind in ("fresh", "pooled"):
            print(f"container_{kind}_start_ms {med(boxed[f'{kind}_start']):.1f}")
            print(f"container_{kind}_turn_ms {med(boxed[f'{kind}_turn']):.1f}")
        ratio = med(boxed["fresh_start"]) / med(boxed["pooled_start"])
        print(f"ratio container start fresh / pooled: {ratio:.1f}")
    if claimed is not None:
        for kind in ("fresh", "pooled"):
            print(f"sandbox_{kind}_start_ms {med(claimed[f'{kind}_start']):.1f}")
            print(f"sandbox_{kind}_turn_ms {med(claimed[f'{kind}_turn']):.1f}")
        ratio = med(claimed["fresh_start"]) / med(claimed["pooled_start"])
        print(f"ratio sandbox start fresh / pooled: {ratio:.1f}")


if __name__ == "__main__":
    main()
