"""``provider="e2b"`` on the E2B API double: the real ``e2b`` SDK builds the compiled context as a
template and creates, pauses, resumes and kills sandboxes, each a real container running the
worker with the real ``claude`` CLI against the scripted model; history in a fake-GCS store."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from harness_run.harnessbox import HarnessBox, StreamEvent
from harness_run.runtime.e2b import E2BEngine, E2BProvider
from harness_run.testing import Rule, ScriptedModel, shell, text

from .conftest import E2B_KEY

pytestmark = [pytest.mark.docker, pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(900)]

RULES = [
    Rule(match="remember", reply=shell("echo kept-4711 > keep.txt && pwd")),
    Rule(match="recall", reply=shell("cat keep.txt")),
    Rule(reply=text("all done"), tool_result=True),
]


def _secrets(model: ScriptedModel) -> dict[str, Any]:
    return {
        "provider_api_key": E2B_KEY,
        "harness_secrets": {"ANTHROPIC_BASE_URL": model.url, "ANTHROPIC_API_KEY": "scripted-dummy-key"},
    }


async def _until(check: Any, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.05)


@pytest.mark.harness
async def test_a_turn_streams_pauses_when_idle_resumes_with_its_workspace_and_kill_deletes_it(
    e2b_env: str, e2b_double: Any
) -> None:
    with ScriptedModel(RULES) as model:
        hb = HarnessBox(provider=E2BProvider(pause_after=0.2), harness="claude-code", secrets=_secrets(model))
        session = await hb.create_session()
        engine = hb.engine
        assert isinstance(engine, E2BEngine)
        first: list[StreamEvent] = [e async for e in session.send_message("remember this")]
        assert [e.type for e in first][-1] == "result"
        assert "all done" in "".join(e.delta or "" for e in first)
        assert e2b_double.count("POST", "/v2/sandboxes") == 1
        [sandbox_id] = list(e2b_double.sandboxes)

        # auto-pause: the double has it paused, and then our client counts it (after closing its client)
        await _until(lambda: e2b_double.sandboxes[sandbox_id].state == "paused" and engine.claims.pauses >= 1)
        assert engine.claims.pauses == 1
        assert e2b_double.docker.containers.get(e2b_double.sandboxes[sandbox_id].container).status == "paused"

        second = await session.send_message("recall it", stream=False)
        assert not second.is_error, second.text
        outputs = [str(getattr(e, "content", "")) for e in session.session.events(turn=2)]
        assert any("kept-4711" in o for o in outputs), outputs  # the same workspace, resumed
        assert e2b_double.count("POST", f"/{sandbox_id}/pause") == 1
        assert e2b_double.count("POST", f"/{sandbox_id}/connect") == 1
        assert list(e2b_double.sandboxes) == [sandbox_id]  # resumed, not re-created
        assert engine.claims.resumes == 1

        # the E2B key went to the API only: not into the sandbox's env, files or events
        assert e2b_double.api_keys == {E2B_KEY}
        container = e2b_double.docker.containers.get(e2b_double.sandboxes[sandbox_id].container)
        assert E2B_KEY not in str(container.attrs["Config"]["Env"])
        found = e2b_double.exec(
            sandbox_id,
            f"grep -rls {E2B_KEY} /run /home /workspace /tmp /etc /opt/harness-run 2>/dev/null; "
            f"cat /proc/*/environ 2>/dev/null | tr '\\0' '\\n' | grep -c {E2B_KEY}",
        )
        assert found.strip() == "0", found
        assert E2B_KEY not in repr([*first, *session.session.events(turn=2)])

        await hb.kill()
        assert e2b_double.count("DELETE", f"/sandboxes/{sandbox_id}") == 1
        assert e2b_double.sandboxes == {}
        assert e2b_double.live_containers() == []


async def test_a_redeploy_of_the_same_spec_builds_nothing(e2b_env: str, e2b_double: Any) -> None:
    from harness_run import AgentSpec
    from harness_run.runtime.e2b import deploy_e2b

    spec = AgentSpec(name="harnessbox", harness="claude-code", model="claude-sonnet-4-6", checkpoint=True)
    await (await deploy_e2b(spec)).aclose()  # built, or found from an earlier test
    builds = e2b_double.count("POST", "/v3/templates")
    started = time.monotonic()
    again = await deploy_e2b(spec)
    took = time.monotonic() - started
    await again.aclose()
    assert e2b_double.count("POST", "/v3/templates") == builds  # found by name: nothing built
    assert e2b_double.count("GET", f"/templates/aliases/{again.claims.template}") >= 2
    assert took < 5.0


async def test_without_a_store_or_key_the_provider_says_what_to_set(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from harness_run import AgentSpec
    from harness_run.errors import UsageError
    from harness_run.runtime.e2b import deploy_e2b

    spec = AgentSpec(name="x", harness="claude-code", model="claude-sonnet-4-6")
    monkeypatch.delenv("E2B_API_KEY", raising=False)
    monkeypatch.delenv("HARNESS_RUN_STORE", raising=False)
    with pytest.raises(UsageError, match=r"E2B API key.*provider_api_key"):
        await deploy_e2b(spec, store="gs://b/p")
    with pytest.raises(UsageError, match=r"history store.*gs://"):
        await deploy_e2b(spec, api_key="k")
