"""MCP secrets reach their server only: a stdio server with ``env_secrets`` is started by the engine
(the harness's config names harness-run's launcher, which relays to it), a remote server's
``header_secrets`` are added by the model proxy (the harness gets a per-turn URL); the harness, its
config files and every process of the turn lack both canaries — on the real CLIs, guards off."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from harness_run import McpServer, SecurityPolicy
from harness_run.testing import ScriptedModel, shell, text, tool_call

from ._attacks import HARNESSES, MODELS, Canaries, model_secrets
from ._mcp_http import McpHttpServer
from .conftest import EngineFactory

MARKER = Path(__file__).resolve().parents[1] / "runtime" / "mcp_marker_server.py"
# the environment of every process of the turn's session (the CLI and all it started), the agent's
# own, its parent's, and the harness's config files
LOOK = (
    "( env; for p in $(ps -o pid= -s $(ps -o sid= -p $$)); do cat /proc/$p/environ; echo; done;"
    " cat /proc/$PPID/environ; cat $HOME/harness-run/* $HOME/.codex/config.toml $HOME/*/mcp.json;"
    " ps -eo args ) 2>/dev/null | tr '\\0' '\\n' | grep -aE 'MCP|MARKER|canary|Bearer|launcher' | sort -u"
)  # (only the lines that matter: a long output is not shown to the model whole)
MCP_TOOL = {"claude-code": "mcp__marker__make_marker", "opencode": "marker_make_marker"}


@pytest.mark.harness
@pytest.mark.parametrize("harness", HARNESSES)
async def test_the_mcp_secret_reaches_its_server_and_nothing_else(
    harness: str, make_engine: EngineFactory, model: ScriptedModel, tmp_path: Path
) -> None:
    with McpHttpServer() as remote:
        await _scenario(harness, make_engine, model, tmp_path, remote)


async def _scenario(
    harness: str, make_engine: EngineFactory, model: ScriptedModel, tmp_path: Path, remote: McpHttpServer
) -> None:
    canaries = Canaries()
    header = f"hdr-canary-{canaries.tag}"
    marker = tmp_path / "marker.json"
    started = tmp_path / "started.txt"
    wrapper = 'printf "%s" "$MARKER_TOKEN" | wc -c > "$0"; exec "$@"'
    server = McpServer.stdio(
        "marker",
        "sh",
        ["-c", wrapper, str(started), sys.executable, str(MARKER), str(marker)],
        env_secrets={"MARKER_TOKEN": "MCP_SECRET"},
    )
    engine = make_engine(
        harness=harness,
        model=MODELS[harness],
        mcp_servers=[
            server,
            McpServer.remote(
                "remote", remote.url, {"X-Plain": "yes"}, {"Authorization": "Bearer ${MCP_HEADER}"}
            ),
        ],
        secrets=["MCP_SECRET", "MCP_HEADER"],
        security_policy=SecurityPolicy(include_credential_guards=False),  # the routing alone
    )
    if harness in MCP_TOOL:  # Codex's model reaches MCP tools from code-mode only: started is checked
        model.add(tool_call(MCP_TOOL[harness], {"note": "via the launcher"}))
    model.add(shell(LOOK), text("done"))
    secrets = {
        **model_secrets(harness, model, canaries.model_key),
        "MCP_SECRET": canaries.mcp_secret,
        "MCP_HEADER": header,
    }
    session = engine.start_session()
    result = await session.run("use the tool, then look around", secrets=secrets)
    assert not result.is_error, result.error

    assert started.read_text().strip() == str(len(canaries.mcp_secret))  # the server got it
    if harness in MCP_TOOL:  # and its tool answered through the relay
        assert json.loads(marker.read_text()) == {
            "note": "via the launcher",
            "token_set": True,
            "token_len": len(canaries.mcp_secret),
        }
    # the remote server got its secret header from the proxy (and the plain one from the harness)
    assert remote.headers, "the harness never reached the remote MCP server"
    assert {h.get("authorization") for h in remote.headers} == {f"Bearer {header}"}
    assert {h.get("x-plain") for h in remote.headers} == {"yes"}
    looked = model.requests[-1].tool_results[-1]
    assert "HARNESS_RUN_MCP_TOKEN=hrm-" in looked and "_mcp_launcher.py marker" in looked  # it looked
    saw = "\n".join(json.dumps(r.body) for r in model.requests)
    assert canaries.mcp_secret not in saw  # not in any process of the turn, nor in its files
    assert header not in saw
    assert "MARKER_TOKEN" not in looked
    stored = "".join(e.model_dump_json() for e in session.events())
    assert canaries.mcp_secret not in stored and header not in stored
