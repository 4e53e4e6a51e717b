"""Deleting a session through the team server's client (``harness_run.connect``): a real server,
real Claude Code turns on the scripted model. ``engine.delete_session`` / ``session.delete()`` go
to ``DELETE /v1/sessions/{id}`` and so through the server engine's ``delete_session``; the errors
are a local engine's: another key's (or an unknown) session is not found, a running turn is busy."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

import harness_run
from harness_run import AgentSpec
from harness_run.errors import SessionBusyError, SessionNotFoundError, UsageError
from harness_run.events import ToolUseEvent
from harness_run.runtime.server_client import ServerHistory, ServerStore, Wire
from harness_run.store import SqliteStore
from harness_run.testing import ScriptedModel, shell, text

from ._helpers import MODEL, ServerThread, call

_KEY = {"ANTHROPIC_API_KEY": "scripted-key"}


def _notes(root: Path, session_id: str) -> list[Path]:
    """The files the session's turn wrote, in its workspace on the server's disk."""
    return [p for p in root.rglob("note.txt") if session_id in str(p)]


@pytest.mark.harness
async def test_delete_goes_through_the_server_with_a_local_engines_errors(
    tmp_path: Path, scripted_model: ScriptedModel
) -> None:
    marker = f"sleep 30.{uuid.uuid4().int % 10**6:06d}"
    scripted_model.add(shell("echo hi > note.txt"), text("noted"))
    scripted_model.add(shell(f"bash -c '{marker}; echo done'"), text("never"))
    spec = AgentSpec(name="del", harness="claude-code", model=MODEL, model_base_url=scripted_model.url)
    with ServerThread(tmp_path, [spec]) as server:
        mine = harness_run.connect(server.url, api_key=server.key)
        other_key = server.new_key("someone else", "turn")
        theirs = harness_run.connect(server.url, api_key=other_key)
        session = mine.start_session()
        sid = session.session_id
        assert not (await session.run("note it", secrets=_KEY)).is_error
        assert (await session.exec("cat note.txt")).stdout == "hi\n"
        assert _notes(tmp_path, sid), "the session's workspace is on the server's disk"

        with pytest.raises(SessionNotFoundError, match="list_sessions"):  # another key's: as unknown
            theirs.delete_session(sid)
        status, refused = call(f"{server.url}/v1/sessions/{sid}", "DELETE", key=other_key)  # the route
        assert status == 404 and "no session" in refused["message"], refused
        with pytest.raises(SessionNotFoundError):
            mine.delete_session(str(uuid.uuid4()))
        assert mine.get_session(sid).record.turns == 1  # still there

        long = session.send("run the long command", secrets=_KEY)
        async for event in long:  # until the long command is under way
            if isinstance(event, ToolUseEvent):
                break
        with pytest.raises(SessionBusyError, match="interrupt"):
            mine.delete_session(sid)
        with pytest.raises(SessionBusyError):  # another client of the same key: the server says so
            harness_run.connect(server.url, api_key=server.key).delete_session(sid)
        with pytest.raises(UsageError, match="force"):
            mine.delete_session(sid, force=True)
        await session.interrupt()
        assert (await long).stop_reason == "interrupted"

        mine.delete_session(sid)
        assert sid not in [r.session_id for r in mine.list_sessions()]
        assert call(f"{server.url}/v1/sessions/{sid}", key=server.key)[0] == 404
        with pytest.raises(SessionNotFoundError):
            mine.get_session(sid)
        with pytest.raises(SessionNotFoundError):  # deleted: not found again, as on a local engine
            mine.delete_session(sid)
        with pytest.raises(UsageError, match="deleted"):
            session.run("again", secrets=_KEY)
        assert not _notes(tmp_path, sid)  # the server's engine removed the workspace

        kept = theirs.start_session()
        kept.delete()  # Session.delete: the same route
        assert kept.session_id not in [r.session_id for r in theirs.list_sessions()]
        await mine.aclose()
        await theirs.aclose()
    store = SqliteStore(tmp_path)
    try:  # the server's history has none of them
        assert store.get_session(sid) is None and store.list_turns(sid) == [] and store.read_events(sid) == []
        assert store.get_session(kept.session_id) is None
    finally:
        store.close()


def test_the_server_history_reader_keeps_its_old_name_for_a_release() -> None:
    wire = Wire("http://127.0.0.1:9", "hrk_unused")
    with pytest.deprecated_call(match="ServerHistory"):
        old = ServerStore(wire)
    assert isinstance(old, ServerHistory)
    assert not hasattr(old, "put_session") and not hasattr(old, "delete_session")  # it writes nothing
