"""What the HarnessBox layer costs over the engine API, one labelled number per line.

    python -m benchmarks harnessbox [--rounds 5] [--files 200] [--provider local|docker]

One session lifecycle, alternating between the two APIs on the same machine, repo and model:

- engine: ``engine.start_session(branch=, base_branch="main")`` -> ``await session.run(prompt)`` ->
  ``await session.aclose()`` (``git.commit="on_close"``, push);
- harnessbox: ``await hb.create_session(branch=)`` -> ``await session.send_message(prompt,
  stream=False)`` -> ``await session.kill()`` (the same spec underneath).

Printed: ``engine_session_ms``, ``harnessbox_session_ms``, their ``ratio``, and ``kill_ms`` (the
commit, the push of a new branch and the release, inside ``kill()``). Medians of ``--rounds``; the
first round of each (the engine's deploy, the image on docker) is left out. The repo: ``--files``
files on the tests' git smart-HTTP server with token auth (127.0.0.1); the model is the scripted one
in its own process.
"""

from __future__ import annotations

import argparse
import asyncio
import time

from benchmarks._common import (
    MODEL,
    claude_spec,
    local_engine,
    median,
    model_secrets,
    scratch,
    scripted_model,
    testkit,
)
from benchmarks._services import docker_env
from harness_run import GitOptions, RepoSource
from harness_run.harnessbox import (
    DockerProvider,
    GitRepoConfig,
    HarnessBox,
    LocalProvider,
    Provider,
    WorkspaceConfig,
)

AUTHOR = "HarnessBox <harnessbox@localhost>"


async def _main(rounds: int, files: int, provider_name: str) -> None:
    root = scratch("srv-")
    git_http = testkit("git_http")
    git_http.make_bare_repo(root, "app", {f"mod{i}.py": f"VALUE = {i}\n" * 10 for i in range(files)})
    token = "bench-repo-token"
    with scripted_model() as url, git_http.GitHttpServer(root, token) as server:
        remote = f"{server.url}/app.git"
        secrets = model_secrets(url)
        workdir = scratch("wd-")
        docker = docker_env("--provider docker") if provider_name == "docker" else None
        spec = claude_spec(
            "harnessbox",
            checkpoint=True,
            repos=[RepoSource.git(remote, auth="HARNESSBOX_GIT_TOKEN")],
            git=GitOptions(
                commit="on_close",
                push=True,
                author=AUTHOR,
                message="HarnessBox: session {session_id} on {branch}",
            ),
        )
        if docker is not None:
            engine = local_engine(spec, workdir=workdir, idle_ttl=3600, **docker.engine_options(None))
            provider: Provider = DockerProvider(workdir=workdir, **docker.image_options())
        else:
            engine = local_engine(spec, workdir=workdir)
            provider = LocalProvider(workdir=workdir)
        hb = HarnessBox(
            provider=provider,
            model=MODEL,
            workspace_config=WorkspaceConfig(git_repo_config=GitRepoConfig(remote, auth_token=token)),
            secrets={"harness_secrets": secrets},
        )
        plain: list[float] = []
        boxed: list[float] = []
        kills: list[float] = []
        for i in range(rounds + 1):
            started = time.perf_counter()
            session = engine.start_session(branch=f"engine-{i}", base_branch="main")
            result = await session.run("write the file", secrets={**secrets, "HARNESSBOX_GIT_TOKEN": token})
            await session.aclose()
            assert not result.is_error, result.error
            assert session.record.pushed_ref
            plain.append(time.perf_counter() - started)

            started = time.perf_counter()
            box_session = await hb.create_session(branch=f"box-{i}")
            answer = await box_session.send_message("write the file", stream=False)
            killing = time.perf_counter()
            await box_session.kill()
            assert not answer.is_error, answer.error
            assert box_session.pushed_ref
            kills.append(time.perf_counter() - killing)
            boxed.append(time.perf_counter() - started)
        await hb.kill()
        await engine.aclose()
    p, b, k = median(plain[1:]), median(boxed[1:]), median(kills[1:])
    print(f"provider {provider_name}, {files} files, {rounds} rounds")
    print(f"engine_session_ms {p * 1000:.1f}")
    print(f"harnessbox_session_ms {b * 1000:.1f}")
    print(f"ratio {b / p:.3f}")
    print(f"kill_ms {k * 1000:.1f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--files", type=int, default=200)
    parser.add_argument("--provider", choices=["local", "docker"], default="local")
    args = parser.parse_args()
    asyncio.run(_main(args.rounds, args.files, args.provider))


if __name__ == "__main__":
    main()
