"""``local.deploy(spec, isolation="container")``: each session in its own container of the compiled
image, driven through the in-image worker (the Agent Sandbox code path), history in the workdir.

Every turn runs the real ``claude`` inside a container (host network) against the scripted model on
127.0.0.1; the image is built once per module (from the local base image, with the proxy's CA).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from testkit.git_http import GitHttpServer, make_bare_repo

from harness_run import AgentSpec, Engine, RepoSource, local
from harness_run.errors import InfrastructureError, SessionBusyError, UsageError
from harness_run.events import ToolResultEvent
from harness_run.local import ContainerOptions, ImageOptions
from harness_run.runtime.container import ContainerEngine
from harness_run.spec import GitOptions
from harness_run.testing import Reply, Rule, ScriptedModel

from ._helpers import MODEL, model_secrets

pytestmark = [pytest.mark.docker, pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(900)]

RULES = [
    Rule(match="write the file", reply=Reply.shell("echo hello-from-turn-1 > out.txt")),
    Rule(match="read the file", reply=Reply.shell("cat out.txt")),
    Rule(match="just answer", reply=Reply.text("plain answer")),
    # not a bare leading `sleep N`: Claude Code refuses that as a Bash command of its own
    Rule(match="take your time", reply=Reply.shell("bash -c 'sleep 60; echo slept'")),
    Rule(match="slow A", reply=Reply.shell("echo A-start >> log.txt; sleep 1; echo A-end >> log.txt")),
    Rule(match="slow B", reply=Reply.shell("echo B-start >> log.txt; sleep 1; echo B-end >> log.txt")),
    Rule(match="mark the project", reply=Reply.shell("cat README.md > seen.txt")),
    Rule(
        match="pool first",
        reply=Reply.shell("echo a > app/a.txt && mkdir -p app/.cache && echo warm > app/.cache/deps"),
    ),
    Rule(match="long job", reply=Reply.shell("echo wip > app/wip.txt && sleep 300")),
    Rule(reply=Reply.text("done"), tool_result=True),
]
LABEL_SESSION = "harness-run.dev/session"


def spec() -> AgentSpec:
    return AgentSpec(name="ctr", harness="claude-code", model=MODEL, checkpoint=True)


@dataclass
class Setup:
    model: ScriptedModel
    workdir: Path
    docker_client: Any
    options: dict[str, Any]

    def deploy(self, **kwargs: Any) -> Any:
        return local.deploy(spec(), workdir=self.workdir, isolation="container", **{**self.options, **kwargs})

    def containers(self, session_id: str) -> list[Any]:
        # ignore_removed: a container removed between docker-py's list and its inspect of each
        # one raised NotFound here (the idle removal racing the check)
        return self.docker_client.containers.list(
            all=True, filters={"label": f"{LABEL_SESSION}={session_id}"}, ignore_removed=True
        )


@pytest.fixture(scope="module")
def setup(
    docker_client: Any,
    docker_labels: dict[str, str],
    base_image: str,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Setup]:
    ca = os.environ.get("PIP_CERT")
    if not ca or not Path(ca).is_file():
        pytest.skip("PIP_CERT does not name the registry proxy's CA file; the image build cannot reach PyPI")
    container = ContainerOptions(
        image=ImageOptions(base_image=base_image, ca_files=[ca]),
        network_mode="host",
        labels=docker_labels,
        docker_client=docker_client,
    )
    options: dict[str, Any] = {"container": container}
    with ScriptedModel(RULES) as model:
        setup = Setup(model, tmp_path_factory.mktemp("ctr") / "workdir", docker_client, options)
        started = time.perf_counter()
        engine = setup.deploy()  # builds the image (or finds it)
        print(
            f"\ncontainer deploy (compile + build or find {engine.image}): {time.perf_counter() - started:.1f} s"
        )
        engine.close()
        yield setup


@pytest.fixture
async def engine(setup: Setup) -> AsyncIterator[Any]:
    eng = setup.deploy()
    yield eng
    await eng.aclose()


def _gone_within(setup: Setup, session_id: str, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while setup.containers(session_id):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)
    return True


def _tool_outputs(events: list[Any]) -> str:
    return "\n".join(e.content for e in events if isinstance(e, ToolResultEvent))


async def test_turns_run_in_an_isolated_container_and_resume(setup: Setup, engine: Any) -> None:
    session = engine.start_session()
    started = time.perf_counter()
    run = session.send("write the file out.txt", secrets=model_secrets(setup.model))
    first_event = first_agent_event = None
    streamed: list[str] = []
    async for event in run:
        if event.type == "delta":  # the worker's live deltas, mirrored into this process's Run
            streamed.append(event.text)
        if first_event is None:
            first_event = time.perf_counter() - started
        if first_agent_event is None and event.type != "user":
            first_agent_event = time.perf_counter() - started
    first = await run
    assert not first.is_error, first.error
    assert first.text == "done"
    assert "".join(streamed) == "done"
    assert not [e for e in session.events(1) if e.type == "delta"]  # live only: not in the history
    ready_s = engine.claims.claimed[-1].ready_s
    print(
        f"\ncold start: container -> worker healthy {ready_s:.2f} s; send -> first event (the prompt) "
        f"{first_event:.2f} s, -> first harness event {first_agent_event:.2f} s"
    )
    containers = setup.containers(session.session_id)
    assert len(containers) == 1 and containers[0].status == "running"
    # turn 2 in the same container resumes turn 1's conversation (the harness's native session)
    again = session.send("now read the file back", secrets=model_secrets(setup.model))
    second = await again
    assert not second.is_error, second.error
    assert "hello-from-turn-1" in _tool_outputs(again.events)
    last = [r for r in setup.model.main_requests if "read the file" in r.text][-1]
    assert "write the file out.txt" in last.text  # turn 1's messages went with turn 2's request
    # commands run in the container's workspace, as the agent's user (not the worker's), not here
    who = await session.exec("id -u && pwd && cat out.txt")
    assert who.exit_code == 0, who.stderr
    uid, workspace, content = who.stdout.split()
    assert (uid, content) == ("1001", "hello-from-turn-1")
    assert workspace == f"/var/lib/harness-run/store/sessions/{session.session_id}/workspace"
    # the workspace lives in the host's workdir (mounted with the store): it outlives the container
    on_host = setup.workdir / "sessions" / session.session_id / "workspace"
    assert (await asyncio.to_thread((on_host / "out.txt").read_text)) == "hello-from-turn-1\n"
    assert (await asyncio.to_thread(on_host.stat)).st_uid == 1001  # handed to the agent's user
    assert [t.turn for t in session.history()] == [1, 2]


async def test_history_survives_a_new_engine_and_the_next_turn_resumes(setup: Setup, engine: Any) -> None:
    session = engine.start_session()
    first = await session.run("write the file out.txt", secrets=model_secrets(setup.model))
    assert not first.is_error, first.error
    await engine.aclose()
    assert setup.containers(session.session_id) == []
    again = local.get_engine("ctr", workdir=setup.workdir, docker_client=setup.docker_client)
    assert isinstance(again, ContainerEngine)  # recorded as a container engine: re-created as one
    try:
        reattached = again.get_session(session.session_id)
        assert [t.turn for t in reattached.history()] == [1]
        stored = reattached.history()[0].result
        assert stored is not None and stored.text == "done"
        run = reattached.send("now read the file back", secrets=model_secrets(setup.model))
        second = await run
        assert not second.is_error, second.error
        assert "hello-from-turn-1" in _tool_outputs(run.events)  # a new container, the same workspace
        assert [t.turn for t in reattached.history()] == [1, 2]
    finally:
        await again.aclose()
    assert setup.containers(session.session_id) == []


async def test_containers_go_after_the_idle_ttl_and_on_close(setup: Setup) -> None:
    eng = setup.deploy(idle_ttl=0.5)
    try:
        session = eng.start_session()
        assert not (await session.run("just answer", secrets=model_secrets(setup.model))).is_error
        assert await asyncio.to_thread(_gone_within, setup, session.session_id, 60.0)  # idle: removed
    finally:
        eng.close()
    held = setup.deploy(idle_ttl=600)
    other = held.start_session()
    assert not (await other.run("just answer", secrets=model_secrets(setup.model))).is_error
    assert len(setup.containers(other.session_id)) == 1
    held.close()  # from synchronous code too
    assert setup.containers(other.session_id) == []


async def test_a_container_engine_is_an_engine_and_its_block_removes_its_containers(setup: Setup) -> None:
    async with setup.deploy(idle_ttl=600) as engine:
        assert isinstance(engine, Engine)
        session = engine.start_session()
        assert not (await session.run("just answer", secrets=model_secrets(setup.model))).is_error
        assert len(setup.containers(session.session_id)) == 1  # held for the next turn
    assert setup.containers(session.session_id) == []  # released by the end of the block
    with pytest.raises(UsageError, match="closed"):
        engine.start_session()


def test_isolation_errors_and_light_import(tmp_path: Path) -> None:
    code = (
        "import sys\n"
        "from harness_run import local\n"
        "import harness_run.runtime.container\n"
        "print([m for m in ('docker', 'aiohttp', 'kubernetes', 'google.cloud.storage') if m in sys.modules])"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
    docker = pytest.importorskip("docker")
    with pytest.raises(UsageError, match=r"isolation must be one of \['process', 'container'\], not 'vm'"):
        local.deploy(spec(), workdir=tmp_path, isolation="vm")  # type: ignore[call-overload]
    dead = docker.DockerClient(base_url=f"unix://{tmp_path}/no-docker.sock", version="1.41", timeout=2)
    with pytest.raises(InfrastructureError, match=r"no Docker engine answers .*start Docker"):
        local.deploy(
            spec(), workdir=tmp_path, isolation="container", container=ContainerOptions(docker_client=dead)
        )


async def test_host_directories_are_bind_mounted_and_shared_workspaces_take_turns(
    setup: Setup, tmp_path: Path
) -> None:
    project = tmp_path / "project"
    project.mkdir()
    (project / "README.md").write_text("mine\n")
    os.chown(project, 1000, 1000)  # the container's user writes into it
    eng = setup.deploy(idle_ttl=600)
    try:
        mapped = eng.start_session({"workspace": {"host_dir": str(project)}})
        done = await mapped.run("mark the project", secrets=model_secrets(setup.model))
        assert not done.is_error, done.error
        assert (project / "seen.txt").read_text() == "mine\n"  # the agent worked in our directory
        a = eng.start_session({"workspace": {"mode": "shared"}})
        b = eng.start_session({"workspace": {"mode": "shared"}})
        secrets = model_secrets(setup.model)
        ra, rb = await asyncio.gather(a.run("slow A", secrets=secrets), b.run("slow B", secrets=secrets))
        assert not ra.is_error and not rb.is_error, (ra.error, rb.error)
        assert setup.containers(a.session_id) and setup.containers(b.session_id)  # two containers
        log = setup.workdir / "shared" / "ctr" / "_default" / "workspace" / "log.txt"
        lines = log.read_text().split()
        first, second = lines[0][0], "B" if lines[0][0] == "A" else "A"
        assert lines == [f"{first}-start", f"{first}-end", f"{second}-start", f"{second}-end"]
        waited = b if first == "A" else a
        steps = [e.step for e in waited.events() if e.type == "setup"]
        assert any(s.startswith("waiting for the workspace") for s in steps), steps
    finally:
        await eng.aclose()


async def test_a_new_session_on_a_branch_takes_over_an_idle_workspace_then_close_with_kill(
    setup: Setup, tmp_path: Path
) -> None:
    """Branch pooling across containers; then ``aclose(kill=True)``: a session's container goes
    while its turn runs, the turn is stored as cancelled, and its ``on_close`` work is neither
    committed nor pushed (a plain ``aclose()`` would push it) — it stays in the workspace."""
    token = f"repo-canary-{os.urandom(6).hex()}"
    bare = make_bare_repo(tmp_path / "srv", "app", {"README.md": "app\n", ".gitignore": ".cache/\n"})
    with GitHttpServer(tmp_path / "srv", token) as server:
        pooled = AgentSpec(
            name="ctr-pool",
            harness="claude-code",
            model=MODEL,
            repos=[RepoSource.git(f"{server.url}/app.git", auth="GH_TOKEN")],
            git=GitOptions(commit="after_turn", push=True),
        )
        options = {**setup.options, "idle_ttl": 600}
        eng = local.deploy(pooled, workdir=setup.workdir, isolation="container", pool_after=0, **options)
        try:
            secrets = {**model_secrets(setup.model), "GH_TOKEN": token}
            first = eng.start_session(branch="feat/c", base_branch="main")
            r1 = await first.run("pool first", secrets=secrets)
            assert not r1.is_error and r1.pushed_ref == "refs/heads/feat/c", r1.error
            second = eng.start_session(branch="feat/c")
            r2 = await second.run("just answer", secrets=secrets)
            assert not r2.is_error, r2.error
            steps = [e.step for e in second.events() if e.type == "setup"]
            assert any(f"reusing the idle workspace of session {first.session_id}" in s for s in steps), steps
            assert not any(s.startswith("cloning") for s in steps), steps
            mine = setup.workdir / "sessions" / second.session_id / "workspace" / "app"
            assert (mine / ".cache" / "deps").read_text() == "warm\n"  # warm, from the other container
            assert not (setup.workdir / "sessions" / first.session_id / "workspace").exists()
            names = {c.name for c in setup.containers(first.session_id) + setup.containers(second.session_id)}
            assert len(names) == 2  # each session in its own container
            assert {r.session_id for r in eng.sessions(branch="feat/c")} == {
                first.session_id,
                second.session_id,
            }
            closing = eng.start_session(
                {"branch": "feat/k", "base_branch": "main", "git": {"commit": "on_close", "push": True}}
            )
            run = closing.run("long job", secrets=secrets)
            wip = setup.workdir / "sessions" / closing.session_id / "workspace" / "app" / "wip.txt"
            deadline = time.monotonic() + 120
            # the file is created before its line is written: kill once the content is there
            while not (wip.exists() and wip.read_text() == "wip\n") and not run.done:
                assert time.monotonic() < deadline, "the turn's command never started"
                await asyncio.sleep(0.1)
            assert not run.done, run.result
            await eng.aclose(kill=True)
            for sid in (first.session_id, second.session_id, closing.session_id):
                assert setup.containers(sid) == []  # at once: no polling
            assert run.result is not None and run.result.stop_reason == "cancelled"
            listed = await asyncio.to_thread(
                subprocess.run,
                ["git", "branch", "--list", "--format=%(refname:short)"],
                cwd=bare,
                capture_output=True,
                text=True,
            )
            assert listed.stdout.split() == ["feat/c", "main"]  # feat/k: nothing pushed
            assert wip.read_text() == "wip\n"  # the work stays in the workspace
            again = local.get_engine("ctr-pool", workdir=setup.workdir, docker_client=setup.docker_client)
            with again:
                (turn,) = again.get_session(closing.session_id).history()
                assert turn.result is not None and turn.result.stop_reason == "cancelled"
        finally:
            await eng.aclose()


async def test_a_turn_whose_client_and_worker_were_killed_is_interrupted_and_send_goes_on(
    setup: Setup, engine: Any
) -> None:
    """The remote path's dead turns: a client SIGKILLed mid-turn leaves its turn running in the
    container (followed from the store by a new process, which cannot steer it); once the container
    is killed too, the turn is stored as interrupted — at once by ``get_session`` when the worker is
    already gone, or by the follower — and the next ``send()`` works the first time."""
    sid = engine.start_session().session_id

    async def killed_client(prompt: str) -> None:
        helper = Path(__file__).with_name("ctr_proc.py")
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            str(helper),
            str(setup.workdir),
            sid,
            setup.model.url,
            prompt,
            stdout=subprocess.PIPE,
        )
        assert proc.stdout is not None
        line = await asyncio.wait_for(proc.stdout.readline(), 180)
        assert line.strip() == b"running"
        # Claude Code writes its transcript a moment after it streams the event: a kill before
        # that loses the prompt from the resumed conversation (what the product promises is the
        # transcript as far as the harness wrote it), so kill once the prompt is on disk
        deadline = time.monotonic() + 30
        while not transcript_has(prompt):
            assert time.monotonic() < deadline, "Claude Code never wrote the turn's prompt"
            await asyncio.sleep(0.05)
        proc.kill()
        await proc.wait()

    def transcript_has(text: str) -> bool:
        home = setup.workdir / "sessions" / sid
        for path in home.rglob("*.jsonl"):
            with contextlib.suppress(OSError):
                if text in path.read_text(errors="replace"):
                    return True
        return False

    def kill_worker() -> None:
        running = setup.docker_client.containers.list(
            filters={"label": f"{LABEL_SESSION}={sid}"}, ignore_removed=True
        )
        assert running, "the turn's container is not running"
        for container in running:
            container.kill()

    # 1. client and worker gone before anyone looks: get_session() finishes the turn at once
    await killed_client("take your time, then answer (one)")
    kill_worker()
    session = engine.get_session(sid)
    assert session.current_run is None and session.status == "idle"
    assert session.last_result is not None and session.last_result.stop_reason == "interrupted"
    assert "worker running this turn ended" in (session.last_result.error or "")
    first = await session.send("just answer", secrets=model_secrets(setup.model))
    assert not first.is_error, first.error  # the first time: no "already in use", no busy
    assert first.text == "plain answer" and first.turn == 2

    # 2. only the client gone: its turn goes on in the container, followed here, not steerable
    await killed_client("take your time, then answer (three)")
    session = engine.get_session(sid)
    followed = session.current_run
    assert followed is not None and followed.turn == 3 and followed.followed
    with pytest.raises(SessionBusyError, match="started by another process"):
        session.send("just answer", secrets=model_secrets(setup.model))
    kill_worker()  # now the worker dies mid-turn too: the follower stores it as interrupted
    ended = await asyncio.wait_for(followed.wait(), 60)
    assert ended.stop_reason == "interrupted", ended.error
    last = await session.send("just answer", secrets=model_secrets(setup.model))
    assert not last.is_error, last.error
    assert [t.result.stop_reason for t in session.history() if t.result] == [
        "interrupted",
        "completed",
        "interrupted",
        "completed",
    ]
    assert "take your time, then answer (one)" in setup.model.main_requests[-1].user_texts  # resumed
