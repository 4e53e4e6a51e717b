"""What the spec gives the agent: an MCP stdio server's tool (with a secret in its env) and a skill."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from harness_run.events import McpServerInfo, StartedEvent, ToolResultEvent, ToolUseEvent
from harness_run.spec import McpServer, SkillSource
from harness_run.testing import ScriptedModel, text, tool_call

from ._helpers import model_secrets
from .conftest import EngineFactory

pytestmark = pytest.mark.harness

SERVER = Path(__file__).with_name("mcp_marker_server.py")


def store_bytes(workdir: Path) -> bytes:
    """Every byte of the store (the SQLite files and blobs; not the sessions' own dirs)."""
    files = [p for p in workdir.iterdir() if p.is_file()] + list((workdir / "blobs").rglob("*"))
    return b"".join(p.read_bytes() for p in files if p.is_file())


async def test_an_mcp_stdio_servers_tool_is_called_with_its_secret_env(
    model: ScriptedModel,
    make_engine: EngineFactory,
    tmp_path: Path,
    workdir: Path,
) -> None:
    marker = tmp_path / "marker.json"
    token = "mcp-token-value-5be1c0de"
    server = McpServer.stdio(
        "marker", sys.executable, [str(SERVER), str(marker)], env_secrets={"MARKER_TOKEN": "MARKER_SECRET"}
    )
    model.add(tool_call("mcp__marker__make_marker", {"note": "hello mcp"}), text("marker made"))
    engine = make_engine(mcp_servers=[server], checkpoint=True)
    session = engine.start_session()
    run = session.run("make the marker", secrets=model_secrets(model, MARKER_SECRET=token))
    result = await run

    assert not result.is_error, result.error
    # offered to the model: as a tool, or (Claude Code 2.1) listed in its deferred-tools reminder
    first = model.main_requests[0]
    listed = [t for m in first.messages for t in m.texts if "mcp__marker__make_marker" in t.splitlines()]
    assert "mcp__marker__make_marker" in first.tool_names or listed
    assert json.loads(marker.read_text()) == {"note": "hello mcp", "token_set": True, "token_len": len(token)}
    [use] = [e for e in run.events if isinstance(e, ToolUseEvent)]
    assert use.name == "mcp__marker__make_marker"
    [tool_result] = [e for e in run.events if isinstance(e, ToolResultEvent)]
    assert tool_result.tool_use_id == use.tool_use_id
    assert "marker written: hello mcp" in tool_result.content
    assert not tool_result.is_error
    started = next(e for e in run.events if isinstance(e, StartedEvent))
    assert started.mcp_servers == (McpServerInfo(name="marker", status="connected"),)
    # the secret reached the server's process, but never the store, the events or the history
    assert token.encode() not in store_bytes(workdir)
    assert token not in "".join(e.model_dump_json() for e in session.events())
    assert token not in "".join(t.model_dump_json() for t in session.history())
    assert session.history()[0].secret_names == ["MARKER_SECRET"]


async def test_a_skill_is_offered_to_the_model(
    model: ScriptedModel,
    make_engine: EngineFactory,
    tmp_path: Path,
) -> None:
    skill = tmp_path / "skills" / "zebra-counter"
    skill.mkdir(parents=True)
    description = "Counts zebras in a field of horses (probe 7781)"
    skill.joinpath("SKILL.md").write_text(
        f"---\nname: zebra-counter\ndescription: {description}\n---\n"
        "Count the zebras, then report the number.\n"
    )
    model.add(text("I can count zebras"))
    engine = make_engine(skills=[SkillSource.local(str(skill))])
    session = engine.start_session()
    run = session.run("what can you do?", secrets=model_secrets(model))
    assert not (await run).is_error

    request = model.main_requests[0]
    assert "Skill" in request.tool_names
    # Claude Code lists the skills available to its Skill tool in a reminder inside the user message
    listing = [
        t
        for m in request.messages
        if m.role == "user"
        for t in m.texts
        if "skills are available for use with the Skill tool" in t
    ]
    assert listing, "no skill listing in the request's messages"
    assert f"- zebra-counter: {description}" in listing[0].splitlines()
    started = next(e for e in run.events if isinstance(e, StartedEvent))
    assert started.skills is not None and "zebra-counter" in started.skills
    staged = engine.workdir / "sessions" / session.session_id / "workspace" / ".claude" / "skills"
    assert (staged / "zebra-counter" / "SKILL.md").is_file()
