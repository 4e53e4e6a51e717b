"""HarnessBox facade semantics on real parts (real ``claude`` against the scripted model, a real
``harness-run serve`` app on 127.0.0.1): the agent and ``run_command`` work in the checkout,
``get_session`` re-attaches, ``deny_network`` is refused where it cannot be enforced, and
``base_url=`` + ``api_key=`` run the same configuration on a team server (``POST /v1/boxes``)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from runtime._hbox import Remote
from runtime._helpers import model_secrets
from server import _helpers as server_helpers

from harness_run.errors import HarnessRunError, UsageError
from harness_run.harnessbox import (
    DockerProvider,
    GitRepoConfig,
    HarnessBox,
    LocalProvider,
    SecurityPolicy,
    WorkspaceConfig,
)
from harness_run.server import ServerPolicy, ServerState, make_app
from harness_run.server._boxes import add_box_routes
from harness_run.testing import Rule, ScriptedModel, shell, text


@pytest.fixture
def model() -> Iterator[ScriptedModel]:
    rules = [
        Rule(match="where", reply=shell("git rev-parse --show-toplevel > where.txt; pwd >> where.txt")),
        Rule(reply=text("all done"), tool_result=True),
        Rule(match="hello", reply=text("hi")),
    ]
    with ScriptedModel(rules) as started:
        yield started


@pytest.mark.harness
async def test_the_agent_and_commands_work_in_the_checkout_and_get_session_reattaches(
    model: ScriptedModel, remote: Remote, tmp_path: Path
) -> None:
    config = WorkspaceConfig(
        git_repo_config=GitRepoConfig(remote.url, auth_token=remote.token, clone_dir_name="named"),
        commit_on_exit=False,
    )
    made = dict(
        provider=LocalProvider(workdir=tmp_path / "wd"),
        workspace_config=config,
        secrets={"harness_secrets": model_secrets(model)},
    )
    async with HarnessBox(**made) as hb:  # pyright: ignore[reportArgumentType]
        session = await hb.create_session()
        assert not (await session.send_message("where are you", stream=False)).is_error
        where = await session.run_command("cat where.txt && ls README.md && pwd")
        top, agent_cwd, listed, command_cwd = where.stdout.split()
        assert top == agent_cwd == command_cwd and listed == "README.md"  # all in the checkout
        session_id = session.session_id
        hb.sessions.clear()  # forget it here: a new HarnessBox would not know it either
        again = await hb.get_session(session_id)
        assert again.session_id == session_id and again.branch == "main"
        assert (await again.run_command("cat where.txt")).stdout.split()[0] == top
        with pytest.raises(HarnessRunError, match="nope"):
            await hb.get_session("nope")


def test_deny_network_is_refused_where_the_provider_cannot_enforce_it(tmp_path: Path) -> None:
    policy = SecurityPolicy(deny_network=True)
    with pytest.raises(UsageError) as caught:
        HarnessBox(provider=LocalProvider(workdir=tmp_path), security_policy=policy)
    assert "'docker' or 'agent-sandbox'" in str(caught.value) and "codex" in str(caught.value)
    on_docker = HarnessBox(provider=DockerProvider(workdir=tmp_path), security_policy=policy)
    assert on_docker.spec.network.egress == "none"  # the container gets no network
    assert not on_docker.spec.security_policy.deny_network  # so claude-code is not refused
    codex = HarnessBox(provider=LocalProvider(workdir=tmp_path), harness="codex", security_policy=policy)
    assert codex.spec.security_policy.deny_network  # codex's own sandbox enforces it
    with pytest.raises(UsageError, match="pool_after"):
        DockerProvider(pool_after=-1)


@pytest.fixture
def box_server(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Any:
    """``harness-run serve``'s app with ``POST /v1/boxes`` added (as ``_app.py`` will wire it)."""

    def with_boxes(state: ServerState, keys: Any, **kw: Any) -> web.Application:
        app = make_app(state, keys, **kw)
        add_box_routes(app, state)
        return app

    monkeypatch.setattr(server_helpers, "make_app", with_boxes)
    return server_helpers.ServerThread


@pytest.mark.harness
async def test_base_url_runs_the_box_on_a_team_server(
    model: ScriptedModel, box_server: Any, tmp_path: Path
) -> None:
    secrets = {"harness_secrets": model_secrets(model)}
    served = HarnessBox(name="team-agent", secrets=secrets, timeout=300)
    policy = ServerPolicy(allow_endpoints=True)  # the scripted model is the endpoint
    with box_server(tmp_path / "srv", [served.spec], policy=policy) as server:
        async with HarnessBox(base_url=server.url, api_key=server.key, secrets=secrets, timeout=300) as hb:
            session = await hb.create_session()
            assert (await session.send_message("hello", stream=False)).text == "hi"
            assert [e.delta async for e in session.send_message("hello") if e.delta] == ["hi"]
            assert (await session.run_command("echo ok")).stdout.strip() == "ok"
        other = HarnessBox(base_url=server.url, api_key=server.key, model="claude-opus-4-1", secrets=secrets)
        with pytest.raises(HarnessRunError, match="team-agent") as caught:
            await other.create_session()
        assert "claude-opus-4-1" in str(caught.value)
        reader = HarnessBox(base_url=server.url, api_key=server.new_key("ro", "read"), secrets=secrets)
        with pytest.raises(HarnessRunError, match="turn"):
            await reader.create_session()


@pytest.mark.docker
@pytest.mark.harness
@pytest.mark.timeout(600)
async def test_deny_network_runs_claude_code_without_network_on_docker(
    model: ScriptedModel, tmp_path: Path, container_options: dict[str, Any]
) -> None:
    hb = HarnessBox(
        provider=DockerProvider(workdir=tmp_path / "wd", **container_options),
        security_policy=SecurityPolicy(deny_network=True),
        secrets={"harness_secrets": model_secrets(model)},
    )
    async with hb:
        session = await hb.create_session()
        assert (await session.send_message("hello", stream=False)).text == "hi"  # the model: via the proxy
        probe = await session.run_command(
            "python3 -c \"import socket; socket.create_connection(('1.1.1.1', 53), 2)\""
        )
        assert probe.exit_code != 0  # nothing else: the container has no network
