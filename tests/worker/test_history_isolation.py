"""History isolation per engine, end to end on fake GCS: the real worker (its store confined to its
engine's folder) running the real ``claude`` against the scripted model resumes a session that an
older version left in the shared layout, once the client (as ``WorkerEngine`` does when it reserves
the turn) has moved it into the engine's folder."""

from __future__ import annotations

import json

import pytest
from testkit.old_layout import to_old_layout

from harness_run.errors import SessionNotFoundError
from harness_run.runtime.worker_client import WorkerClient
from harness_run.store import GcsStore, open_store
from harness_run.testing import ScriptedModel, shell, text

from .conftest import SPEC, TOKEN, WorkerFactory, new_session
from .test_worker import collect, turn

pytestmark = [pytest.mark.harness, pytest.mark.integration]


def _names(store: GcsStore) -> list[str]:
    blobs = store._client.list_blobs(store.bucket_name, prefix=f"{store.prefix}/")  # pyright: ignore[reportPrivateUsage]
    return sorted(b.name.removeprefix(f"{store.prefix}/") for b in blobs)


async def test_a_session_of_the_old_layout_resumes_on_a_confined_worker_once_its_client_moved_it(
    start_worker: WorkerFactory, gcs_store_url: str, model: ScriptedModel
) -> None:
    model.add(shell("printf 'turn one file' > made.txt"), text("turn one answer"), text("turn two answer"))
    sid = new_session(gcs_store_url)
    first = start_worker(gcs_store_url, name="first")
    async with WorkerClient(first.url, TOKEN) as client:
        info = await client.start_turn(turn(sid, "first prompt alpha", model))
        assert (await collect(client, info.turn_id))[-1]["result"]["text"] == "turn one answer"
    assert first.stop() == 0

    admin = open_store(gcs_store_url)
    assert isinstance(admin, GcsStore)
    record = admin.get_session(sid)
    assert record is not None and record.snapshot is not None and record.snapshot.native
    keys = [
        k for t in admin.list_turns(sid) if t.snapshot for k in (t.snapshot.workspace, t.snapshot.native) if k
    ]
    to_old_layout(admin, SPEC.name, sid, *keys)  # as an older version left it
    assert f"sessions/{sid}/session.json" in _names(admin)

    second = start_worker(gcs_store_url, name="second")  # nothing local: all from the store
    async with WorkerClient(second.url, TOKEN) as client:
        with pytest.raises(SessionNotFoundError, match=f"no session '{sid}' of engine 'wk'"):
            await client.start_turn(turn(sid, "too early", model, turn=2))  # its folder has no such session

        admin.for_engine(SPEC.name).reserve_turn(sid, 2, "client-holder")  # the client's reservation moves it
        names = _names(admin)
        assert not [n for n in names if n.startswith(("sessions/", "index/"))]
        assert all(f"history/wk/blobs/{k}" in names for k in keys)  # copied (the old ones may be shared)

        made = await client.exec(sid, "cat made.txt")  # the snapshot moved with it
        assert made.stdout == "turn one file"
        info = await client.start_turn(turn(sid, "second prompt bravo", model, turn=2))
        events = await collect(client, info.turn_id)
    assert events[-1]["result"]["text"] == "turn two answer"
    last = json.dumps(model.main_requests[-1].json)  # Claude Code resumed its own moved transcript
    assert "first prompt alpha" in last and "turn one answer" in last and "second prompt bravo" in last
    assert [t.turn for t in admin.list_turns(sid)] == [1, 2]
    assert "confined" not in second.log  # the worker never asked for anything outside its folder
    admin.delete_session(sid)
    assert not [n for n in _names(admin) if sid in n]
    admin.close()
