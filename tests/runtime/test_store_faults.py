"""Store faults during turns are error results, never exceptions or a stuck session: a full disk
(SQLite ``max_page_count``: the database cannot grow) makes the turn's result an error naming it and
the session takes the next turn once there is room; a deleted snapshot blob is named."""

from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path
from typing import cast

import pytest

from harness_run.store import SqliteStore
from harness_run.testing import ScriptedModel, shell, text

from ._helpers import model_secrets, workspace_of
from .conftest import EngineFactory

pytestmark = pytest.mark.harness


def connection(store: object) -> sqlite3.Connection:
    assert isinstance(store, SqliteStore)
    return cast(sqlite3.Connection, vars(store)["_db"])  # the engine's own connection


async def test_a_full_disk_gives_an_error_result_and_the_session_goes_on(
    model: ScriptedModel, make_engine: EngineFactory, workdir: Path
) -> None:
    model.add(text("one"), shell("echo hi > a.txt"), text("two"), text("two again"))
    engine = make_engine(checkpoint=True)
    session = engine.start_session()
    secrets = model_secrets(model)
    assert not (await session.run("one", secrets=secrets)).is_error

    db = connection(engine.store)
    pages = int(db.execute("PRAGMA page_count").fetchone()[0])
    db.execute(f"PRAGMA max_page_count={pages}")  # the disk is full: the database cannot grow
    run = session.run("two", secrets=secrets)
    result = await run
    assert run.done and result.is_error and result.stop_reason == "error"
    assert "could not be stored" in (result.error or "") and "full" in (result.error or "")
    assert session.status == "failed"

    db.execute("PRAGMA max_page_count=1073741823")  # room again: the same session goes on
    again = await session.run("two again", secrets=secrets)
    assert not again.is_error, again.error
    assert [t.turn for t in session.history()] == [1, 2]

    # a deleted snapshot is named, not "No conversation found"
    shutil.rmtree(workdir / "blobs")
    shutil.rmtree(workspace_of(engine, session.session_id))
    lost = await session.run("three", secrets=secrets)
    assert lost.is_error
    assert "workspace snapshot" in (lost.error or "") and "is missing from the store" in (lost.error or "")
    assert session.status == "failed"
