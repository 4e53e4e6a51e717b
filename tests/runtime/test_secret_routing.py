"""Secret routing on every harness: each secret reaches only its consumer — the repo token git (clone
and the agent's own push, also after a restore), an MCP secret its server, model keys the harness, a
plain declared secret the agent — and no canary value is ever stored, logged, emitted or raised."""

from __future__ import annotations

import base64
import sys
import uuid
from pathlib import Path

import pytest
from testkit.git_http import GitHttpServer, log, make_bare_repo

from harness_run import AgentSpec, McpServer, RepoSource, Secret, SecurityPolicy, local
from harness_run.errors import UsageError
from harness_run.runtime.local._workspace import scrub_git_credentials
from harness_run.security._secrets import exposed_secrets, git_auth_env, resolve_secrets
from harness_run.testing import ScriptedModel, error, shell, text

from ._harnesses import HARNESS, HARNESSES
from ._helpers import model_secrets, workspace_of
from .conftest import EngineFactory
from .test_secrets import store_contents

SERVER = Path(__file__).with_name("mcp_marker_server.py")
NO_RETRIES = {"CLAUDE_CODE_MAX_RETRIES": "0", "HARNESS_RUN_CODEX_MAX_RETRIES": "0"}


def _env_file(path: Path) -> dict[str, str]:
    return dict(line.split("=", 1) for line in path.read_text().splitlines() if "=" in line)


@pytest.mark.harness
@pytest.mark.parametrize("name", HARNESSES)
async def test_each_secret_reaches_only_its_consumer_and_no_canary_is_ever_kept(
    model: ScriptedModel, make_engine: EngineFactory, workdir: Path, tmp_path: Path, name: str
) -> None:
    harness = HARNESS[name]
    tag = uuid.uuid4().hex[:12]
    agent_value, mcp_value = f"agent-canary-{tag}", f"mcp-canary-{tag}"
    repo_token, model_key = f"repo-canary-{tag}", f"sk-canary-{tag}"
    started = tmp_path / "mcp-started.txt"
    wrapper = 'printf "%s" "$MARKER_TOKEN" | wc -c > "$0"; exec "$@"'
    server = McpServer.stdio(
        "marker",
        "sh",
        ["-c", wrapper, str(started), sys.executable, str(SERVER), str(tmp_path / "marker.json")],
        env_secrets={"MARKER_TOKEN": "MCP_SECRET"},
    )
    make_bare_repo(tmp_path / "srv", "app", {"README.md": "app\n"})
    with GitHttpServer(tmp_path / "srv", repo_token) as git_server:
        engine = harness.engine(
            make_engine,
            checkpoint=True,
            secrets=["AGENT_SECRET"],
            repos=[RepoSource.git(f"{git_server.url}/app.git", ref="main", auth="GH_TOKEN")],
            mcp_servers=[server],
            env=NO_RETRIES,
            # routing is checked beneath the credential guards, which would refuse the agent's `env`
            security_policy=SecurityPolicy(include_credential_guards=False),
        )
        session = engine.start_session()
        secrets = {
            **harness.secrets(model),
            "AGENT_SECRET": agent_value,
            "MCP_SECRET": mcp_value,
            "GH_TOKEN": repo_token,
        }
        secrets["ANTHROPIC_API_KEY" if name == "claude-code" else "OPENAI_API_KEY"] = model_key
        model.add(
            shell('env | sort > env.txt; echo "agent=$AGENT_SECRET"'),
            text(f"I saw {agent_value} and {repo_token}"),  # a model may well repeat what it saw
            error(400, f"bad request: key {model_key} for {mcp_value}"),
        )
        run = session.run("dump the environment", secrets=secrets)
        result = await run
        assert not result.is_error, result.error
        failed = await session.run("again", secrets=secrets)
        assert failed.is_error
        assert git_server.authorized > 0  # the clone authenticated with the token
        assert git_server.refused == 0

    workspace = workspace_of(engine, session.session_id)
    env = _env_file(workspace / "env.txt")
    # the agent's own secret: in its shell; the routed ones: not under their names
    assert env["AGENT_SECRET"] == agent_value
    assert "GH_TOKEN" not in env
    assert "MCP_SECRET" not in env and "MARKER_TOKEN" not in env
    # git asks the engine for the token through a credential helper: not even its base64 form is here
    assert repo_token not in "\n".join(env.values())
    assert base64.b64encode(f"x-access-token:{repo_token}".encode()).decode() not in "\n".join(env.values())
    assert env["GIT_CONFIG_KEY_0"] == f"credential.{git_server.url}/app.git.helper"
    assert started.read_text().strip() == str(len(mcp_value))  # the MCP server got its secret
    if name == "codex":  # Codex keeps *KEY*/*TOKEN*/*SECRET* variables out of its tool shells
        assert model_key not in "\n".join(env.values())
        assert not [k for k in env if k.startswith("HARNESS_RUN_MCP_")]
    assert "agent=***" in "".join(e.model_dump_json() for e in run.events)  # redacted, not dropped

    texts: list[str] = []
    for bad in (
        {**secrets, "UNDECLARED": agent_value},
        {k: v for k, v in secrets.items() if k != "MCP_SECRET"},
    ):
        with pytest.raises(UsageError) as caught:
            session.run("third", secrets=bad)
        texts.append(str(caught.value))
    seen = {
        "run events": "".join(e.model_dump_json() for e in run.events),
        "results": result.model_dump_json() + failed.model_dump_json(),
        "history": "".join(t.model_dump_json() for t in session.history()),
        "stored events": "".join(e.model_dump_json() for e in session.events()),
        "session record": session.record.model_dump_json(),
        "errors": "\n".join(texts) + (failed.error or ""),
    }
    store = store_contents(workdir)
    assert any("!" in n for n in store), "no checkpoint snapshot in the store"
    basic = base64.b64encode(f"x-access-token:{repo_token}".encode()).decode()
    for value in (agent_value, mcp_value, repo_token, model_key, basic):
        leaks = [where for where, content in seen.items() if value in content]
        leaks += [n for n, data in store.items() if value.encode() in data]
        assert leaks == [], f"{value} found in {leaks}"


@pytest.mark.harness
async def test_the_agent_pushes_with_the_repo_token_also_after_a_restore(
    model: ScriptedModel, make_engine: EngineFactory, workdir: Path, tmp_path: Path
) -> None:
    token = f"repo-canary-{uuid.uuid4().hex[:12]}"
    bare = make_bare_repo(tmp_path / "srv", "app", {"README.md": "app\n"})
    push = (
        "cd app && echo {n} > {n}.txt && git add -A && "
        "git -c user.name=a -c user.email=a@a commit -qm {n} && git push -q origin HEAD:main && echo pushed-{n}"
    )
    model.add(
        shell(push.format(n="one")), text("pushed one"), shell(push.format(n="two")), text("pushed two")
    )
    with GitHttpServer(tmp_path / "srv", token) as git_server:
        repo_url = f"{git_server.url}/app.git"
        spec_fields = {"checkpoint": True, "repos": [RepoSource.git(repo_url, ref="main", auth="GH_TOKEN")]}
        engine = HARNESS["claude-code"].engine(make_engine, **spec_fields)
        session = engine.start_session()
        first = await session.run("commit and push", secrets=model_secrets(model, GH_TOKEN=token))
        assert not first.is_error, first.error
        assert any(e.type == "tool_result" and "pushed-one" in e.content for e in session.events(1))
        assert log(bare) == ["one", "init"]

        # a sloppy agent (or user) wrote the token into the remote URL: scrubbed before it is stored
        workspace = workspace_of(engine, session.session_id)
        config = workspace / "app" / ".git" / "config"
        config.write_text(config.read_text().replace("http://", f"http://x-access-token:{token}@"))
        # the workspace is lost: another process restores it from the checkpoint and pushes again
        import shutil

        shutil.rmtree(workspace.parent)
        other = local.get_engine(engine.name, workdir=workdir)
        again = other.get_session(session.session_id)
        second = await again.send("push again", secrets=model_secrets(model, GH_TOKEN=token))
        other.close()
        assert not second.is_error, second.error
        assert log(bare) == ["two", "one", "init"]
        # (git asks the helper only after the server's 401 challenge: `refused` counts those)
    text_ = config.read_text()
    assert token not in text_
    assert f"url = {repo_url}" in text_
    assert [n for n, data in store_contents(workdir).items() if token.encode() in data] == []


# --- the pure parts -------------------------------------------------------------------------------


def _spec(**fields: object) -> AgentSpec:
    return AgentSpec(name="a", harness="claude-code", model="claude-sonnet-4-6", **fields)  # type: ignore[arg-type]


def test_routing_rules_and_the_expose_override() -> None:
    spec = _spec(
        secrets=["PLAIN", Secret("HIDDEN", expose=False), Secret("GH_TOKEN", expose=True)],
        repos=[RepoSource.git("https://git.example/r.git", auth="GH_TOKEN")],
        mcp_servers=[
            McpServer.remote("s", "https://mcp.example", header_secrets={"Authorization": "Bearer ${SEARCH}"})
        ],
    )
    given = {"PLAIN": "p", "HIDDEN": "h", "GH_TOKEN": "g", "SEARCH": "s", "OPENAI_API_KEY": "k"}
    assert exposed_secrets(spec, given) == {"PLAIN": "p", "GH_TOKEN": "g", "OPENAI_API_KEY": "k"}
    routed = _spec(repos=[RepoSource.git("https://git.example/r.git", auth="GH_TOKEN")])
    assert exposed_secrets(routed, {"GH_TOKEN": "g"}) == {}
    env = git_auth_env(routed.repos, {"GH_TOKEN": "g"})
    assert env["GIT_CONFIG_COUNT"] == "1"
    assert env["GIT_CONFIG_KEY_0"] == "http.https://git.example/r.git.extraHeader"
    assert (
        env["GIT_CONFIG_VALUE_0"] == "Authorization: Basic " + base64.b64encode(b"x-access-token:g").decode()
    )
    assert git_auth_env(routed.repos, {}) == {}
    assert "expose" not in _spec(secrets=["X"]).to_dict()["secrets"][0]  # digests of old specs unchanged
    assert AgentSpec.from_dict(spec.to_dict()) == spec


def test_scrub_takes_tokens_out_of_git_config(tmp_path: Path) -> None:
    spec = _spec(repos=[RepoSource.git("https://git.example/app.git", auth="GH_TOKEN")])
    config = tmp_path / "app" / ".git" / "config"
    config.parent.mkdir(parents=True)
    config.write_text(
        '[remote "origin"]\n\turl = https://x-access-token:tok-12345@git.example/app.git\n'
        "[http]\n\textraHeader = Authorization: Bearer tok-12345\n[user]\n\tname = a\n"
    )
    assert scrub_git_credentials(tmp_path, spec, ["tok-12345"]) == [config]
    assert (
        config.read_text()
        == '[remote "origin"]\n\turl = https://git.example/app.git\n[http]\n[user]\n\tname = a\n'
    )
    assert scrub_git_credentials(tmp_path, spec, ["tok-12345"]) == []


def test_claude_code_needs_no_key_when_vertex_is_configured(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in (
        "ANTHROPIC_API_KEY",
        "ANTHROPIC_AUTH_TOKEN",
        "CLAUDE_CODE_OAUTH_TOKEN",
        "OPENROUTER_API_KEY",
    ):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HARNESS_RUN_VERTEX_PROJECT", "my-project")
    assert resolve_secrets(_spec(), {}) == {}
    assert resolve_secrets(_spec(), {"CLAUDE_CODE_USE_VERTEX": "1"}) == {"CLAUDE_CODE_USE_VERTEX": "1"}
