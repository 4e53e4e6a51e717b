"""Branch pooling: starting a session on a (remote, branch) whose idle workspace is taken over, vs a
fresh clone — the repository (``--files`` files, 2,000 by default) served by a real git smart-HTTP
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

    python benchmarks/workspace_pool.py [--files 2000] [--runs 3] [--smoke] [--container] [--sandbox]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import shutil
import statistics
import sys
import time
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import MODEL, scratch, scripted_model  # noqa: E402
from testkit.git_http import GitHttpServer, make_bare_repo  # noqa: E402

from harness_run import AgentSpec, RepoSource, local  # noqa: E402
from harness_run.events import SetupEvent  # noqa: E402
from harness_run.runtime.local import SessionPaths  # noqa: E402
from harness_run.runtime.local._pool import pool_key, refresh_repo, take_idle_workspace  # noqa: E402
from harness_run.runtime.local._workspace import _clone  # noqa: E402  # pyright: ignore[reportPrivateUsage]


def _ms(start: float) -> float:
    return (time.perf_counter() - start) * 1000


def _files(count: int) -> dict[str, str]:
    files = {f"pkg{i % 40}/mod{i}.py": f"VALUE = {i}\n" * 20 for i in range(count)}
    return {**files, "README.md": "bench\n"}


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
        clone.append(_ms(start))
        donor.pool_key.write_text(pool_key(spec.name, spec, branch[0]) + "\n")
        taker = SessionPaths(workdir / "sessions" / str(uuid.uuid4()))
        start = time.perf_counter()
        key = pool_key(spec.name, spec, branch[0])
        taken = take_idle_workspace(workdir, key, taker, spec, secrets, lambda _sid: None, 0.0)
        if taken is None:
            raise SystemExit("the idle workspace was not taken over")
        refresh_repo(taker.workspace / repo.dir_name, repo, secrets, branch)
        pooled.append(_ms(start))
        shutil.rmtree(taker.root)
    return clone, pooled


def _container_options() -> dict[str, object]:
    ca = os.environ.get("PIP_CERT")
    if not os.environ.get("DOCKER_HOST") or not ca:
        raise SystemExit("--container needs DOCKER_HOST and PIP_CERT (see TESTING.md, docker tests)")
    return {
        "isolation": "container",
        "base_image": os.environ.get("HARNESS_RUN_TEST_BASE_IMAGE", "harness-run/base:trixie"),
        "ca_files": [ca],
        "network_mode": "host",
        "idle_ttl": 600.0,
    }


def _sandbox_engine(spec: AgentSpec, stack: contextlib.ExitStack) -> Any:
    """``spec`` deployed on the test cluster (torn down with ``stack``), lending at once."""
    import docker
    from testkit.cluster import ClusterEmulator, SandboxController

    from harness_run import sandbox
    from harness_run.testing import FakeGcsServer

    registry, ca = os.environ.get("HARNESS_RUN_TEST_REGISTRY"), os.environ.get("PIP_CERT")
    if not registry or not os.environ.get("DOCKER_HOST") or not ca:
        raise SystemExit(
            '--sandbox needs DOCKER_HOST, HARNESS_RUN_TEST_REGISTRY and PIP_CERT: eval "$(scripts/services env)"'
        )
    client = docker.DockerClient(base_url=os.environ["DOCKER_HOST"], timeout=600)
    gcs = stack.enter_context(FakeGcsServer())
    os.environ.update(gcs.env)
    cluster = stack.enter_context(ClusterEmulator())
    labels = {"org.harness-run.bench": uuid.uuid4().hex[:12]}
    controller = SandboxController(cluster, client, extra_env=dict(gcs.env), labels=labels)
    stack.callback(controller.stop)
    return sandbox.deploy(
        spec,
        project="bench-project",
        location="us-central1",
        cluster=sandbox.ClusterTarget(api_client=cluster.api_client()),
        image=sandbox.ImageOptions(
            base_image=os.environ.get("HARNESS_RUN_TEST_BASE_IMAGE", "harness-run/base:trixie"),
            ca_files=[ca],
            build_network="host",
            registry=f"{registry}/hr-bench",
        ),
        pods=sandbox.PodOptions(runtime_class=None),
        claims=sandbox.ClaimOptions(idle_ttl=600.0, pool_after=0.0),
        store=f"gs://{gcs.create_bucket('hr-bench-' + uuid.uuid4().hex[:8])}/hr",
        docker_client=client,
    )


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
    secrets = {"ANTHROPIC_BASE_URL": model_url, "ANTHROPIC_API_KEY": "bench", "T": token}
    out: dict[str, list[float]] = {
        k: [] for k in ("fresh_start", "fresh_turn", "pooled_start", "pooled_turn")
    }
    with contextlib.ExitStack() as stack:
        if runtime == "sandbox":
            engine = _sandbox_engine(spec, stack)
        else:
            options = _container_options() if runtime == "container" else {}
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
                        started = _ms(start)
                result = await turn
                total = _ms(start)
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
    make_bare_repo(served, "app", _files(files))
    with GitHttpServer(served, token) as server:
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
