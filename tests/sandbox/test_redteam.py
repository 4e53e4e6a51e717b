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
    Canaries,
)
from security._mcp_http import McpHttpServer
from testkit.git_http import GitHttpServer, make_bare_repo

from harness_run import AgentSpec, McpServer, RepoSource, Secret, SecurityPolicy, SessionConfig
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
    """What the module's spec points at on the host's 127.0.0.1, and the module's repo token."""

    git: GitHttpServer
    mcp: McpHttpServer
    repo_token: str


@pytest.fixture(scope="module")
def services(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Services]:
    root = tmp_path_factory.mktemp("srv")
    make_bare_repo(root, "app", {"README.md": "app\n"})
    token = f"canary-repo-{uuid.uuid4().hex[:12]}"
    with GitHttpServer(root, token) as git, McpHttpServer() as mcp:
        yield Services(git, mcp, token)


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
