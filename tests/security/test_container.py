"""The same guarantees inside the container runtime (the in-image worker runs the turn): the
credential guards refuse the attacks, and with the guards off the model proxy alone keeps the model
key out of the agent's environment and out of every request the model receives."""

from __future__ import annotations

import base64
import hashlib
import json
from pathlib import Path
from typing import Any

import pytest
from runtime._git_http import GitHttpServer, log, make_bare_repo

from harness_run import AgentSpec, McpServer, RepoSource, SecurityPolicy, SessionConfig, local
from harness_run.testing import Reply, ScriptedModel, shell, text, tool_call

from ._attacks import (
    DENIED_MARKERS,
    HARNESSES,
    HISTORY_ATTACKS,
    MODELS,
    SHELL_ATTACKS,
    TOOL_ATTACKS,
    VERTEX_LOOK,
    Canaries,
    model_secrets,
    unguarded_env_dump,
    vertex_key_file,
)
from ._mcp_http import McpHttpServer

pytestmark = [pytest.mark.docker, pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(1200)]
ATTACKS = (
    "env",
    "proc-self-environ",
    "proc-parent-environ",
    "proc-every-environ",
    "python-os-environ",
    "dotenv",
    "aws-credentials",
    "git-config-list",
    "git-config-env",
    "model-key-var",
    "metadata-ip",
)
# the guarded sessions also deny a command pattern: the policy's own rules hold in the container too
PUSH_DENIED = SecurityPolicy(denied_bash_patterns=["git push*"])
MULTI: dict[str, Any] = {
    "harness": "claude-code",
    "model": "claude-sonnet-4-6",
    "extra_harnesses": ["codex", "opencode"],
}


def _attacks(harness: str, shell_attacks: list[str]) -> list[Reply]:
    """The shell attacks, the history-store attacks and the harness's web-fetch, sub-agent and file
    tools, one tool call per model reply."""
    commands = [
        *(SHELL_ATTACKS[name] for name in shell_attacks),
        *HISTORY_ATTACKS.values(),
        "git push origin HEAD:main; echo pushed-anyway",  # denied by PUSH_DENIED's pattern
    ]
    return [*(shell(c) for c in commands), *(tool_call(n, dict(a)) for n, a in TOOL_ATTACKS[harness])]


@pytest.fixture(scope="module")
def options(container_opts: Any) -> dict[str, Any]:
    return {"isolation": "container", "container": container_opts}


async def test_guards_and_proxy_hold_in_the_container(options: dict[str, Any], tmp_path: Path) -> None:
    canaries = Canaries()
    spec = AgentSpec(
        name="sec-ctr", harness="claude-code", model="claude-sonnet-4-6", env={"CLAUDE_CODE_MAX_RETRIES": "0"}
    )
    with ScriptedModel() as model:
        engine = local.deploy(spec, workdir=tmp_path / "workdir", **options)
        try:
            secrets = {"ANTHROPIC_BASE_URL": model.url, "ANTHROPIC_API_KEY": canaries.model_key}
            attacks = _attacks("claude-code", list(ATTACKS))
            model.add(*attacks, text("done"))
            session = engine.start_session(config=SessionConfig(security_policy=PUSH_DENIED))
            guarded = await session.run("collect the credentials", secrets=secrets)
            assert not guarded.is_error, guarded.error
            outputs = model.requests[-1].tool_results
            assert len(outputs) == len(attacks)
            assert all(any(m in o.lower() for m in DENIED_MARKERS) for o in outputs), outputs

            dump = await unguarded_env_dump(engine, model, secrets)
            assert "hrp-" in dump and "ANTHROPIC_API_KEY" in dump  # the turn token, not the key
        finally:
            await engine.aclose()
        bodies = "\n".join(json.dumps(r.body) for r in model.requests)
    assert canaries.model_key not in bodies


@pytest.mark.parametrize("harness", ["codex", "opencode"])
async def test_guards_and_proxy_hold_in_the_container_on_codex_and_opencode(
    options: dict[str, Any], tmp_path: Path, harness: str
) -> None:
    canaries = Canaries()
    model_id = {"codex": "gpt-5.6-luna", "opencode": "openai/gpt-5.1"}[harness]
    spec = AgentSpec(name="sec-ctr-multi", env={"HARNESS_RUN_CODEX_MAX_RETRIES": "0"}, **MULTI)
    attacks = [a for a in ATTACKS if a != "proc-every-environ" or harness != "opencode"]  # see TESTING.md
    with ScriptedModel() as model:
        engine = local.deploy(spec, workdir=tmp_path / "workdir", **options)
        try:
            secrets = {"OPENAI_BASE_URL": model.openai_url, "OPENAI_API_KEY": canaries.model_key}
            guarded = engine.start_session(
                config=SessionConfig(harness=harness, model=model_id, security_policy=PUSH_DENIED)
            )
            replies = _attacks(harness, attacks)
            model.add(*replies, text("done"))
            result = await guarded.run("collect the credentials", secrets=secrets)
            assert not result.is_error, result.error
            outputs = model.requests[-1].tool_results
            assert len(outputs) == len(replies)
            assert all(any(m in o.lower() for m in DENIED_MARKERS) for o in outputs), outputs

            relaxed = engine.start_session(
                config=SessionConfig(
                    harness=harness,
                    model=model_id,
                    security_policy=SecurityPolicy(include_credential_guards=False),
                )
            )
            model.add(shell('env | sort; cat /proc/$PPID/environ | tr "\\0" "\\n"'), text("done"))
            looked = await relaxed.run("find the key", secrets=secrets)
            assert not looked.is_error, looked.error
            assert "hrp-" in model.requests[-1].tool_results[-1]
        finally:
            await engine.aclose()
        bodies = "\n".join(json.dumps(r.body) for r in model.requests)
    assert canaries.model_key not in bodies


@pytest.mark.parametrize("harness", HARNESSES)
async def test_the_agent_in_the_container_holds_no_repo_token_or_mcp_header_secret(
    options: dict[str, Any], tmp_path: Path, harness: str
) -> None:
    """The worker in the container clones with the token, the agent's git asks the worker for it per
    request, and the worker's model proxy adds a remote MCP server's secret header: with the guards
    off, the agent's environment, its parent's and ``.git/config`` hold neither secret."""
    canaries = Canaries()
    token, header = canaries.repo_token, canaries.mcp_secret
    basic = base64.b64encode(f"x-access-token:{token}".encode()).decode()
    bare = make_bare_repo(tmp_path / "srv", "app", {"README.md": "app\n"})
    with (
        GitHttpServer(tmp_path / "srv", token) as git_server,
        McpHttpServer() as remote,
        ScriptedModel() as model,
    ):
        url = f"{git_server.url}/app.git"
        spec = AgentSpec(
            name="sec-ctr-repo",
            repos=[RepoSource.git(url, ref="main", auth="GH_TOKEN")],
            mcp_servers=[
                McpServer.remote(
                    "remote", remote.url, {"X-Plain": "yes"}, {"Authorization": "Bearer ${MCP_HEADER}"}
                )
            ],
            secrets=["MCP_HEADER"],
            env={"HARNESS_RUN_CODEX_MAX_RETRIES": "0", "CLAUDE_CODE_MAX_RETRIES": "0"},
            **MULTI,
        )
        engine = local.deploy(spec, workdir=tmp_path / "workdir", **options)
        try:
            session = engine.start_session(
                config=SessionConfig(
                    harness=harness,
                    model=MODELS[harness],
                    security_policy=SecurityPolicy(include_credential_guards=False),
                )
            )
            model.add(
                shell(
                    "cd app && echo one > one.txt && git add -A && git -c user.name=a -c user.email=a@a "
                    "commit -qm one && git push -q origin HEAD:main && echo pushed-one"
                ),
                shell('env | sort; tr "\\0" "\\n" < /proc/$PPID/environ; cat app/.git/config'),
                text("done"),
            )
            base = model_secrets(harness, model, "sk-dummy-key")
            secrets = {**base, "GH_TOKEN": token, "MCP_HEADER": header}
            result = await session.run("commit, push, look around", secrets=secrets)
            assert not result.is_error, result.error
            pushed, dumped = model.requests[-1].tool_results[-2:]
        finally:
            await engine.aclose()
        assert "pushed-one" in pushed, pushed
        assert log(bare) == ["one", "init"]  # the agent's own push authenticated
        assert git_server.authorized > 0
        assert "HARNESS_RUN_GIT_TOKEN=hrg-" in dumped, dumped  # what the agent holds: a turn token
        # the remote MCP server got its secret header from the worker's proxy
        assert remote.headers, "the harness never reached the remote MCP server"
        assert {h.get("authorization") for h in remote.headers} == {f"Bearer {header}"}
        bodies = "\n".join(json.dumps(r.body) for r in model.requests)
    for secret in (token, basic, header):
        assert secret not in bodies


@pytest.mark.parametrize(
    ("harness", "variable"),
    [("claude-code", "CLAUDE_CODE_OAUTH_TOKEN"), ("opencode", "ANTHROPIC_API_KEY")],
    ids=["claude-subscription-token", "opencode-built-in-anthropic-provider"],
)
async def test_other_model_credentials_stay_with_the_workers_proxy(
    options: dict[str, Any], tmp_path: Path, harness: str, variable: str
) -> None:
    """A Claude subscription token, and OpenCode's own ``anthropic`` provider (no endpoint variable:
    the driver writes the proxy into its ``baseURL``): with the guards off, the agent in the
    container finds a turn token; the endpoint gets the real credential."""
    canaries = Canaries()
    spec = AgentSpec(name="sec-ctr-multi", env={"HARNESS_RUN_CODEX_MAX_RETRIES": "0"}, **MULTI)
    with ScriptedModel() as model:
        engine = local.deploy(spec, workdir=tmp_path / "workdir", **options)
        try:
            session = engine.start_session(
                config=SessionConfig(
                    harness=harness,
                    model="claude-sonnet-4-6",  # OpenCode: anthropic/claude-sonnet-4-6
                    security_policy=SecurityPolicy(include_credential_guards=False),
                )
            )
            model.add(shell('env | sort; tr "\\0" "\\n" < /proc/$PPID/environ'), text("done"))
            secrets = {"ANTHROPIC_BASE_URL": model.url, variable: canaries.model_key}
            result = await session.run("find the key", secrets=secrets)
            assert not result.is_error, result.error
        finally:
            await engine.aclose()
    asked = [r for r in model.requests if r.is_model_request]
    assert asked and {r.api for r in asked} == {"anthropic"}
    assert f"{variable}=hrp-" in asked[-1].tool_results[-1]
    assert canaries.model_key not in "\n".join(json.dumps(r.body) for r in model.requests)
    real = hashlib.sha256(canaries.model_key.encode()).hexdigest()
    assert {r.credential_sha256 for r in asked} == {real}


MARKER = Path(__file__).resolve().parents[1] / "runtime" / "mcp_marker_server.py"
MCP_TOOL = {"claude-code": "mcp__marker__make_marker", "opencode": "marker_make_marker"}


@pytest.mark.parametrize("harness", HARNESSES)
async def test_a_stdio_mcp_secret_reaches_only_its_server_in_the_container(
    options: dict[str, Any], tmp_path: Path, harness: str
) -> None:
    """The worker starts a stdio MCP server with its ``env_secrets`` and the harness's config names
    the launcher that relays to it: with the guards off, the agent's environment, its parent's, the
    processes it can see and the harness's config files hold no MCP secret; the server had it."""
    canaries = Canaries()
    server = McpServer.stdio(  # the marker server's source, run by the image's python3
        "marker",
        "python3",
        ["-c", MARKER.read_text(), f"/tmp/marker-{canaries.tag}.json"],  # fresh-machine ok: in the container
        env_secrets={"MARKER_TOKEN": "MCP_SECRET"},
    )
    spec = AgentSpec(
        name="sec-ctr-mcp",
        mcp_servers=[server],
        secrets=["MCP_SECRET"],
        env={"HARNESS_RUN_CODEX_MAX_RETRIES": "0", "CLAUDE_CODE_MAX_RETRIES": "0"},
        **MULTI,
    )
    look = (
        "( env; cat /proc/$PPID/environ; for p in /proc/[0-9]*; do cat $p/environ $p/cmdline; echo; done;"
        " cat $HOME/harness-run/* $HOME/.codex/config.toml $HOME/*/mcp.json $HOME/.claude.json ) 2>/dev/null"
        " | tr '\\0' '\\n' | grep -aE 'MCP|MARKER|canary|launcher' | sort -u"
    )
    with ScriptedModel() as model:
        engine = local.deploy(spec, workdir=tmp_path / "workdir", **options)
        try:
            session = engine.start_session(
                config=SessionConfig(
                    harness=harness,
                    model=MODELS[harness],
                    security_policy=SecurityPolicy(include_credential_guards=False),
                )
            )
            if harness in MCP_TOOL:  # Codex's model reaches MCP tools from code-mode only
                model.add(tool_call(MCP_TOOL[harness], {"note": "via the launcher"}))
            model.add(shell(look), text("done"))
            base = model_secrets(harness, model, "sk-dummy-key")
            secrets = {**base, "MCP_SECRET": canaries.mcp_secret}
            result = await session.run("use the tool, then look around", secrets=secrets)
            assert not result.is_error, result.error
        finally:
            await engine.aclose()
    results = model.requests[-1].tool_results
    if harness in MCP_TOOL:  # the server answered through the relay, holding the secret
        assert f"via the launcher; token length {len(canaries.mcp_secret)}" in results[0], results
    assert "HARNESS_RUN_MCP_TOKEN=hrm-" in results[-1], results[-1]  # it looked: a turn token
    assert canaries.mcp_secret not in "\n".join(json.dumps(r.body) for r in model.requests)


async def test_deny_network_in_the_container(options: dict[str, Any], tmp_path: Path) -> None:
    """Codex's sandbox (bubblewrap: user namespaces, which the container's seccomp profile refuses)
    cannot cut its shell's network in a container: the turn is an error result naming the field and
    the fix, nothing starts, and a session without the setting works. Claude Code and OpenCode
    refuse the setting, naming it, before anything starts."""
    import socket

    from harness_run import SpecError

    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(0.5)
    port = listener.getsockname()[1]
    spec = AgentSpec(name="sec-ctr-multi", env={"HARNESS_RUN_CODEX_MAX_RETRIES": "0"}, **MULTI)
    policy = SecurityPolicy(deny_network=True)
    with ScriptedModel() as model:
        engine = local.deploy(spec, workdir=tmp_path / "workdir", **options)
        try:
            secrets = {"OPENAI_BASE_URL": model.openai_url, "OPENAI_API_KEY": "sk-dummy-key"}
            codex = SessionConfig(harness="codex", model=MODELS["codex"])
            refused = engine.start_session(config=codex.model_copy(update={"security_policy": policy}))
            cut = await refused.run(f"git ls-remote http://127.0.0.1:{port}/repo.git", secrets=secrets)
            assert model.requests == []  # refused before Codex started: nothing reached the model
            model.add(shell("echo still-runs"), text("done"))
            after = await engine.start_session(config=codex).run("go on", secrets=secrets)
            for harness in ("claude-code", "opencode"):
                config = SessionConfig(harness=harness, model=MODELS[harness], security_policy=policy)
                with pytest.raises(SpecError) as caught:
                    await engine.start_session(config=config).run("go", secrets=secrets)
                assert caught.value.issues[0].path == "security_policy.deny_network"
        finally:
            await engine.aclose()
    with pytest.raises(TimeoutError):
        listener.accept()
    listener.close()
    assert cut.is_error and cut.error is not None
    assert "security_policy.deny_network" in cut.error and "network: none" in cut.error, cut.error
    assert not after.is_error, after.error
    assert "still-runs" in model.requests[-1].tool_results[-1]


async def test_claude_on_vertex_in_the_container_holds_no_google_credential(
    options: dict[str, Any], tmp_path: Path
) -> None:
    """Claude Code on Vertex AI with a key file on the client's machine: the worker's proxy gets the
    file's content (the container cannot open the client's path) and adds an access token to each
    request; with the guards off the agent finds the proxy's address and no Google credential, and
    the worker's environment is closed to it."""
    spec = AgentSpec(
        name="sec-ctr-vertex",
        harness="claude-code",
        model=MODELS["claude-code"],
        env={"CLAUDE_CODE_MAX_RETRIES": "0"},
    )
    with ScriptedModel() as model:
        key = vertex_key_file(tmp_path, model)
        engine = local.deploy(spec, workdir=tmp_path / "workdir", **options)
        try:
            relaxed = engine.start_session(
                config=SessionConfig(security_policy=SecurityPolicy(include_credential_guards=False))
            )
            model.add(shell(f"{VERTEX_LOOK}; tr '\\0' '\\n' < /proc/1/environ"), text("done"))
            result = await relaxed.run("find the google credentials", secrets=key.secrets(model))
            assert not result.is_error, result.error
            looked = model.requests[-1].tool_results[-1]
            key.check(model, looked)
            assert "/proc/1/environ: permission denied" in looked.lower(), looked
            stored = "".join(e.model_dump_json() for e in relaxed.events())
        finally:
            await engine.aclose()
    assert key.pem_line not in stored and "ya29." not in stored


# the image's guard module with a verdict that raises (appended: the last ``verdict`` wins, for the
# engine's guard server and the hook command alike)
_BROKEN_GUARD = (
    "import harness_run.harness._guard as g, pathlib; p = pathlib.Path(g.__file__); "
    "p.write_text(p.read_text() + '\\ndef verdict(*args, **kwargs):\\n    raise RuntimeError(\\'guard bug\\')\\n')"
)


def _broken_guard_image(docker_client: Any, image: str) -> str:
    """``image`` with its guard's verdict raising: a tag of its own (removed by the caller)."""
    import io
    import shlex

    tag = f"{image.rsplit(':', 1)[0]}-broken-guard:{hashlib.sha256(image.encode()).hexdigest()[:12]}"
    user = docker_client.images.get(image).attrs["Config"].get("User") or "root"
    dockerfile = f"FROM {image}\nUSER root\nRUN python -c {shlex.quote(_BROKEN_GUARD)}\nUSER {user}\n"
    docker_client.images.build(fileobj=io.BytesIO(dockerfile.encode()), tag=tag, rm=True, forcerm=True)
    return tag


async def test_a_crashing_guard_denies_in_the_container(options: dict[str, Any], tmp_path: Path) -> None:
    """The guard's verdict raises (an image whose guard module is broken): on the real worker and
    CLIs, Claude Code's HTTP hook gets a 500 and Codex's and OpenCode's command hook a deny — the
    tool call is blocked on each harness and its command never runs."""
    spec = AgentSpec(name="sec-ctr-multi", env={"HARNESS_RUN_CODEX_MAX_RETRIES": "0"}, **MULTI)
    docker_client = options["container"].docker_client
    with ScriptedModel() as model:
        engine = local.deploy(spec, workdir=tmp_path / "workdir", **options)
        broken = _broken_guard_image(docker_client, engine.image)
        try:
            engine.claims.image = broken
            outputs: dict[str, str] = {}
            for harness in HARNESSES:
                model.add(shell("echo ran > ran.txt; echo ran-$((6 * 7))"), text("done"))
                session = engine.start_session(config=SessionConfig(harness=harness, model=MODELS[harness]))
                result = await session.run("run it", secrets=model_secrets(harness, model, "sk-dummy-key"))
                assert not result.is_error, (harness, result.error)
                outputs[harness] = model.requests[-1].tool_results[-1]
                left = await session.exec("ls ran.txt")
                assert left.exit_code != 0, (harness, left)  # the command never ran
        finally:
            await engine.aclose()
            docker_client.images.remove(broken, force=True)
    for harness, output in outputs.items():
        assert "ran-42" not in output, (harness, output)
        assert any(m in output.lower() for m in DENIED_MARKERS), (harness, output)
