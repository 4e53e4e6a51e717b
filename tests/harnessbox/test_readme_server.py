"""HarnessBox README's "Server" example as written: ``HarnessBox(base_url=..., secrets={...})`` against
a real ``harness-run serve`` app on 127.0.0.1 (``tests/server/_helpers.py``'s ``ServerThread``) that
serves the engine this configuration makes (``POST /v1/boxes`` picks it). Only the server's address
changes (``runtime/_readme.py``'s ``adapt``); the API key comes from ``HARNESS_RUN_API_KEY``, as the
README's snippet passes none. Then "Same API, same streaming, same everything": the README's own
quickstart calls on the box it made."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from runtime._hbox import RULES
from runtime._helpers import model_secrets
from runtime._readme import adapt, readme_blocks, run_block
from server._helpers import ServerThread

from harness_run.harnessbox import HarnessBox, StreamEvent
from harness_run.server import ServerPolicy
from harness_run.testing import ScriptedModel


@pytest.mark.harness
async def test_readme_server_example_runs_the_box_on_a_served_engine(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    source = adapt(readme_blocks()["Server"][0])
    assert "HarnessBox(base_url=SERVER_URL, secrets=" in source, source
    with ScriptedModel(RULES) as model:
        secrets = {"harness_secrets": model_secrets(model)}
        served = HarnessBox(secrets=secrets).spec  # what the operator serves: this configuration's spec
        policy = ServerPolicy(allow_endpoints=True)  # the scripted model is the endpoint
        with ServerThread(tmp_path / "srv", [served], scopes=("turn", "exec"), policy=policy) as server:
            monkeypatch.setenv("HARNESS_RUN_API_KEY", server.key)
            found: dict[str, Any] = {
                "HarnessBox": HarnessBox,
                "SERVER_URL": server.url,
                "MODEL_SECRETS": secrets["harness_secrets"],
            }
            await run_block(source, found)
            hb: HarnessBox = found["hb"]
            assert hb.provider.name == "server"
            session = await hb.create_session()
            events: list[StreamEvent] = [e async for e in session.send_message("Hello")]
            assert "".join(e.delta or "" for e in events) == "hello there"
            assert events[-1].type == "result"
            assert (await session.run_command("echo ok")).stdout.strip() == "ok"  # exec on the server
            again = await session.send_message("Hello", stream=False)  # right after the stream: not busy
            assert again.text == "hello there" and not again.is_error
            await hb.kill()
            assert server.key not in repr(hb) and server.key not in repr(events)
