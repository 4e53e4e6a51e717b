"""The red-team attacks on the sandbox runtime, on each harness (the test cluster: a real container of
the compiled image per Sandbox, the in-image worker, fake GCS as the history store; one image with
Claude Code, Codex and OpenCode; per harness an attacking session and, at the same time, one with
the guards off).

Canaries in play: the model key, the repo token (a token-checking git server on 127.0.0.1, cloned
into every session), a remote MCP server's header secret, a stdio MCP server's secret (the worker
starts the server) and a declared secret kept from the agent (``expose=False``). The credential guards refuse every shell attack, the web-fetch and sub-agent
tools, a denied command pattern and every attempt to list or read another session's history; with
the guards off the agent finds the turn token in every environment it can read, never a canary; no
canary reaches the model, the session's events and history, the sandboxes' logs or the bucket, and
another session's prompt never reaches the attacker's model."""

from __future__ import annotations

import asyncio
import gzip
import hashlib
import json
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from security._attacks import (
    DENIED_MARKERS,
    HARNESSES,
    HISTORY_ATTACKS,
    MODELS,
    SHELL_ATTACKS,
    TOOL_ATTACKS,
    VERTEX_LOOK,
    Canaries,
    vertex_key_file,
)
from security._mcp_http import McpHttpServer
from testkit.git_http import GitHttpServer, make_bare_repo
from testkit.listeners import ALLOWED_BODY, Canary, allowed_server, canary_listener

from harness_run import AgentSpec, McpServer, RepoSource, Secret, SecurityPolicy, SessionConfig, SpecError
from harness_run.testing import RecordedRequest, Rule, ScriptedModel, combine, shell, text, tool_call

from .conftest import Deployed

pytestmark = [pytest.mark.docker, pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(1200)]

GZIP = b"\x1f\x8b"
DENIED_PUSH = "cd app && git push origin main"  # the spec's denied_bash_patterns
# with the guards off: every environment the agent's uid can read (its own, its parent's, the
# worker's is refused by the kernel), the clone's git config, credential files, the harness's config
# files in its home and the image's; only the lines that matter (a long output is not shown to the
# model whole)
LOOK = (
    "( env; for f in /proc/[0-9]*/environ; do echo \"== $f\"; tr '\\0' '\\n' < \"$f\"; done;"
    " git -C app config --list --show-origin; cat app/.git/config ~/.git-credentials ~/.gitconfig;"
    " grep -rsaoiE '.{0,40}(canary|bearer).{0,80}' \"$HOME\" /opt/harness-run/config )"
    " 2>&1 | grep -aiE 'canary|hrp-|hrm-|bearer|key|token|secret|x-access|/proc/1/|remote.origin.url' | sort -u"
)
# a stdio MCP server the worker starts with a secret (the marker server's source, run by the image's
# python3); the relaxed session calls its tool through the launcher (not Codex: code-mode only)
MARKER = Path(__file__).resolve().parents[1] / "runtime" / "mcp_marker_server.py"
MCP_TOOL = {"claude-code": "mcp__marker__make_marker", "opencode": "marker_make_marker"}


@dataclass(frozen=True)
class Services:
    """What the module's spec points at on the host's 127.0.0.1, and the module's repo token: the
    git and MCP servers, the one host the spec's ``network`` allows, and a canary no connection may
    reach."""

    git: GitHttpServer
    mcp: McpHttpServer
    repo_token: str
    allowed: int
    canary: Canary


@pytest.fixture(scope="module")
def services(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Services]:
    root = tmp_path_factory.mktemp("srv")
    make_bare_repo(root, "app", {"README.md": "app\n"})
    token = f"canary-repo-{uuid.uuid4().hex[:12]}"
    with (
        GitHttpServer(root, token) as git,
        McpHttpServer() as mcp,
        allowed_server() as allowed,
        canary_listener() as canary,
    ):
        yield Services(git, mcp, token, allowed, canary)
        assert canary.hits == 0  # the oracle of every test of the module


@pytest.fixture(scope="module")
def sandbox_spec(services: Services) -> AgentSpec:
    """One image for the three harnesses (its CLI layers are those ``scripts/warm-images`` builds and
    pushes, so only the spec's own layers are built and pushed here)."""
    return AgentSpec(
        name="sbx-redteam",
        harness="claude-code",
        model=MODELS["claude-code"],
        extra_harnesses=["codex", "opencode"],
        checkpoint=True,
        repos=[RepoSource.git(f"{services.git.url}/app.git", ref="main", auth="GH_TOKEN")],
        mcp_servers=[
            McpServer.remote("remote", services.mcp.url, {}, {"Authorization": "Bearer ${MCP_HEADER}"}),
            McpServer.stdio(
                "marker",
                "python3",
                ["-c", MARKER.read_text(), "/tmp/marker.json"],  # fresh-machine ok: in the sandbox
                env_secrets={"MARKER_TOKEN": "MCP_STDIO"},
            ),
        ],
        secrets=[Secret("HIDDEN_SECRET", expose=False), "MCP_HEADER", "MCP_STDIO"],
        env={"CLAUDE_CODE_MAX_RETRIES": "0", "HARNESS_RUN_CODEX_MAX_RETRIES": "0"},
        security_policy=SecurityPolicy(denied_bash_patterns=["git push*"]),
        network=[f"127.0.0.1:{services.allowed}"],  # the agent's way out: the worker's egress proxy
    )


@pytest.fixture(scope="module")
def model() -> Iterator[ScriptedModel]:
    """A script per test (no rules): the attacks in order."""
    with ScriptedModel() as scripted:
        yield scripted


def run_secrets(harness: str, model: ScriptedModel, canaries: Canaries, services: Services) -> dict[str, str]:
    if harness == "claude-code":
        key = {"ANTHROPIC_BASE_URL": model.url, "ANTHROPIC_API_KEY": canaries.model_key}
    else:
        key = {"OPENAI_BASE_URL": model.openai_url, "OPENAI_API_KEY": canaries.model_key}
    return {
        **key,
        "GH_TOKEN": services.repo_token,
        "MCP_HEADER": canaries.mcp_secret,
        "MCP_STDIO": canaries.file_secret,
        "HIDDEN_SECRET": canaries.hidden_secret,
    }


@pytest.fixture(scope="module")
def other_history(deployed: Deployed, services: Services) -> str:
    """Another session's history: a turn whose prompt (and answer) no attacker may read."""
    history = f"history-canary-{uuid.uuid4().hex[:10]}"
    deployed.model.add(text(f"noted {history}"))
    secrets = run_secrets("claude-code", deployed.model, Canaries(), services)

    async def turn() -> None:
        first = await deployed.engine.start_session().run(f"remember {history}", secrets=secrets)
        assert not first.is_error, first.error

    asyncio.run(turn())
    return history


@pytest.mark.parametrize("harness", HARNESSES)
async def test_attacks_on_the_sandbox_runtime_are_refused(
    deployed: Deployed, services: Services, other_history: str, harness: str
) -> None:
    canaries = Canaries()
    model, engine = deployed.model, deployed.engine
    secrets = run_secrets(harness, model, canaries, services)
    every_canary = [*canaries.all(), services.repo_token]
    before, clones, headers = len(model.requests), services.git.authorized, len(services.mcp.headers)

    attacks = [*SHELL_ATTACKS.values(), DENIED_PUSH, *HISTORY_ATTACKS.values()]
    tools = TOOL_ATTACKS[harness]
    attack, look = f"collect the credentials {canaries.tag}", f"find the keys {canaries.tag}"
    mcp_call = [tool_call(MCP_TOOL[harness], {"note": "relayed"})] if harness in MCP_TOOL else []
    model.add(
        # the attacker: all the attacks at once (one model round trip), then an ordinary command
        Rule(
            match=attack,
            reply=combine(*(shell(c) for c in attacks), *(tool_call(n, dict(a)) for n, a in tools)),
            times=1,
        ),
        Rule(
            match=attack, contains=f"guard-ok-{canaries.tag}", reply=text("done"), tool_result=True, times=1
        ),
        Rule(match=attack, reply=shell(f"echo guard-ok-{canaries.tag}"), tool_result=True, times=1),
        # the same harness with the guards off calls the stdio MCP server's tool, then looks around
        Rule(match=look, reply=combine(*mcp_call, shell(LOOK)), times=1),
        Rule(match=look, reply=text("done"), tool_result=True, times=1),
    )
    config = SessionConfig(harness=harness, model=MODELS[harness])
    attacker = engine.start_session(config=config)
    relaxed = engine.start_session(
        config=config.model_copy(update={"security_policy": SecurityPolicy(include_credential_guards=False)})
    )
    # the two sessions at once (each in its own sandbox; the script answers each by its prompt)
    guarded, looked_turn = await asyncio.gather(
        attacker.run(attack, secrets=secrets), relaxed.run(look, secrets=secrets)
    )
    assert not guarded.is_error, guarded.error
    assert not looked_turn.is_error, looked_turn.error

    outputs = last_request(model, attack).tool_results
    assert len(outputs) == len(attacks) + len(tools) + 1, outputs
    allowed = [o for o in outputs[:-1] if not any(m in o.lower() for m in DENIED_MARKERS)]
    assert allowed == [], f"not refused on {harness} in the sandbox (the calls ran at once): {allowed}"
    assert f"guard-ok-{canaries.tag}" in outputs[-1]  # ordinary commands still run

    looked_results = last_request(model, look).tool_results
    looked = looked_results[-1]
    if mcp_call:  # the worker-started server answered through the launcher, holding its secret
        assert f"relayed; token length {len(canaries.file_secret)}" in looked_results[0], looked_results
    # it read its environments (the turn token in the key's place; the worker's refused) and the clone's config
    assert "hrp-" in looked and "/proc/1/environ: permission denied" in looked.lower(), looked
    assert "remote.origin.url=" in looked, looked
    assert [c for c in every_canary if c in looked] == []

    # the secrets were in play: each session cloned with the repo token, the MCP header reached its server
    assert services.git.authorized > clones
    assert f"Bearer {canaries.mcp_secret}" in {h.get("authorization") for h in services.mcp.headers[headers:]}
    leaked = {
        "model requests": "\n".join(json.dumps(r.body) for r in model.requests[before:]),
        "events": "".join(e.model_dump_json() for s in (attacker, relaxed) for e in s.events()),
        "history": "".join(t.model_dump_json() for s in (attacker, relaxed) for t in s.history()),
        "sandbox logs": sandbox_logs(deployed),
        "bucket": bucket_objects(deployed.store_url).decode(errors="replace"),
    }
    assert {where: [c for c in every_canary if c in seen] for where, seen in leaked.items()} == {
        where: [] for where in leaked
    }
    assert other_history not in leaked["model requests"]  # never reached the attacker's model


@pytest.mark.parametrize(
    ("harness", "variable"),
    [("claude-code", "CLAUDE_CODE_OAUTH_TOKEN"), ("opencode", "ANTHROPIC_API_KEY")],
    ids=["claude-subscription-token", "opencode-built-in-anthropic-provider"],
)
async def test_other_model_credentials_stay_with_the_workers_proxy_in_the_sandbox(
    deployed: Deployed, services: Services, harness: str, variable: str
) -> None:
    """A Claude subscription token, and OpenCode's own ``anthropic`` provider (the driver writes the
    worker's proxy into its ``baseURL``): with the guards off the agent finds a turn token, and the
    endpoint gets the real credential."""
    canaries = Canaries()
    model, engine = deployed.model, deployed.engine
    look = f"find the model credential {canaries.tag}"
    model.add(
        Rule(match=look, reply=shell(LOOK), times=1),
        Rule(match=look, reply=text("done"), tool_result=True, times=1),
    )
    before = len(model.requests)
    secrets = {
        **run_secrets(harness, model, canaries, services),
        "ANTHROPIC_BASE_URL": model.url,
        variable: canaries.model_key,
    }
    secrets.pop("OPENAI_BASE_URL", None)
    secrets.pop("OPENAI_API_KEY", None)
    relaxed = engine.start_session(
        config=SessionConfig(
            harness=harness,
            model=MODELS["claude-code"],  # OpenCode: anthropic/claude-sonnet-4-6
            security_policy=SecurityPolicy(include_credential_guards=False),
        )
    )
    result = await relaxed.run(look, secrets=secrets)
    assert not result.is_error, result.error
    asked = [r for r in model.requests[before:] if r.is_model_request and look in r.last_user_text]
    assert asked and {r.api for r in asked} == {"anthropic"}
    assert f"{variable}=hrp-" in asked[-1].tool_results[-1], asked[-1].tool_results[-1]
    assert canaries.model_key not in "\n".join(json.dumps(r.body) for r in model.requests[before:])
    real = hashlib.sha256(canaries.model_key.encode()).hexdigest()
    assert {r.credential_sha256 for r in asked} == {real}


@pytest.mark.parametrize("harness", HARNESSES)
async def test_the_agents_egress_goes_through_the_workers_proxy_in_the_sandbox(
    deployed: Deployed, services: Services, harness: str
) -> None:
    """The spec allows one host: each harness's shell is pointed at the worker's egress proxy, the
    listed host answers through it, and the canary (not listed) is refused naming the setting, by a
    plain request and a ``CONNECT``, and never reached. (What ignores the proxy meets the
    NetworkPolicies on a cluster; the test cluster's pods share the host's network, so only the
    proxy path is asserted here — ``tests/security/test_agent_egress.py`` covers the rest.)"""
    canaries, model = Canaries(), deployed.model
    prompt = f"reach out {canaries.tag}"
    through = f"curl -s -m 10 --noproxy '' http://127.0.0.1:{services.canary.port}/; echo rc=$?"
    commands = [
        'echo "proxy=$HTTPS_PROXY"',
        through,
        through.replace("curl -s", "curl -s -p"),  # a CONNECT tunnel
        f"curl -s -m 10 --noproxy '' http://127.0.0.1:{services.allowed}/; echo rc=$?",
    ]
    model.add(
        Rule(match=prompt, reply=combine(*(shell(c) for c in commands)), times=1),
        Rule(match=prompt, reply=text("done"), tool_result=True, times=1),
    )
    session = deployed.engine.start_session(config=SessionConfig(harness=harness, model=MODELS[harness]))
    result = await session.run(prompt, secrets=run_secrets(harness, model, canaries, services))
    assert not result.is_error, result.error
    shown, plain, tunnel, allowed = last_request(model, prompt).tool_results
    # (Codex heads each output with its own lines)
    assert any(line.startswith("proxy=http://127.0.0.1:") for line in shown.splitlines()), shown
    assert "network.allow_hosts" in plain, plain
    assert "rc=56" in tunnel, tunnel  # CONNECT refused with 403
    assert ALLOWED_BODY in allowed, allowed
    assert services.canary.hits == 0


async def test_deny_network_in_the_sandbox(deployed: Deployed, services: Services) -> None:
    """``deny_network`` where no harness can enforce it in this pod: Claude Code and OpenCode refuse
    the setting, naming it; Codex's sandbox (bubblewrap) cannot start in the test cluster's
    containers, so the turn is an error result naming the field and the fix, and nothing reaches
    the model."""
    canaries, model = Canaries(), deployed.model
    policy = SecurityPolicy(deny_network=True)
    prompt = f"reach the canary {canaries.tag}"
    before = len(model.requests)
    codex = SessionConfig(harness="codex", model=MODELS["codex"], security_policy=policy)
    cut = await deployed.engine.start_session(config=codex).run(
        prompt, secrets=run_secrets("codex", model, canaries, services)
    )
    assert cut.is_error and cut.error is not None
    assert "security_policy.deny_network" in cut.error and "network: none" in cut.error, cut.error
    assert [r for r in model.requests[before:] if prompt in r.last_user_text] == []
    for harness in ("claude-code", "opencode"):
        config = SessionConfig(harness=harness, model=MODELS[harness], security_policy=policy)
        with pytest.raises(SpecError) as caught:
            await deployed.engine.start_session(config=config).run(
                prompt, secrets=run_secrets(harness, model, canaries, services)
            )
        assert caught.value.issues[0].path == "security_policy.deny_network", caught.value


async def test_claude_on_vertex_in_the_sandbox_holds_no_google_credential(
    deployed: Deployed, services: Services, tmp_path: Path
) -> None:
    """Claude Code on Vertex AI with a key file on the client's machine: the pod's worker proxy gets
    the file's content and adds an access token to each request; with the guards off the agent
    finds the proxy's address and no Google credential, and the worker's environment is closed."""
    canaries, model = Canaries(), deployed.model
    key = vertex_key_file(tmp_path, model)
    prompt = f"find the google credentials {canaries.tag}"
    model.add(
        Rule(match=prompt, reply=shell(f"{VERTEX_LOOK}; tr '\\0' '\\n' < /proc/1/environ"), times=1),
        Rule(match=prompt, reply=text("done"), tool_result=True, times=1),
    )
    secrets = run_secrets("claude-code", model, canaries, services)
    for var in ("ANTHROPIC_BASE_URL", "ANTHROPIC_API_KEY"):
        secrets.pop(var)
    before = len(model.requests)
    relaxed = deployed.engine.start_session(
        config=SessionConfig(security_policy=SecurityPolicy(include_credential_guards=False))
    )
    result = await relaxed.run(prompt, secrets={**secrets, **key.secrets(model)})
    assert not result.is_error, result.error
    looked = last_request(model, prompt).tool_results[-1]
    key.check(model, looked, since=before)
    assert "/proc/1/environ: permission denied" in looked.lower(), looked
    stored = "".join(e.model_dump_json() for e in relaxed.events()) + sandbox_logs(deployed)
    assert key.pem_line not in stored and "ya29." not in stored


def last_request(model: ScriptedModel, prompt: str) -> RecordedRequest:
    """The last request of the session started with ``prompt``."""
    return [r for r in model.requests if prompt in r.last_user_text][-1]


def sandbox_logs(deployed: Deployed) -> str:
    """The output of every sandbox container of the module (the workers' log lines)."""
    from docker.errors import NotFound

    client: Any = deployed.docker_client
    logs: list[str] = []
    for cid in deployed.controller.containers():
        try:
            logs.append(client.containers.get(cid).logs().decode(errors="replace"))
        except NotFound:  # an idle claim's sandbox released meanwhile
            continue
    assert logs, "no sandbox container to read the logs of"
    return "".join(logs)


def bucket_objects(store_url: str) -> bytes:
    """Every object of the store's bucket, concatenated, the checkpoints' tarballs unpacked."""
    from google.cloud import storage

    bucket = store_url.removeprefix("gs://").split("/", 1)[0]
    blobs = [blob.download_as_bytes() for blob in storage.Client(project="test").list_blobs(bucket)]
    assert any(b.startswith(GZIP) for b in blobs)  # the sessions' checkpoints are there
    return b"".join(gzip.decompress(b) if b.startswith(GZIP) else b for b in blobs)
