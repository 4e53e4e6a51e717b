"""Claude Code on Vertex AI through the model proxy, on the real CLI: the proxy holds the Google
credentials and adds a fresh access token to each request; Claude Code gets the proxy's address with
a per-turn path token and never a Google credential (file, refresh token or access token).

The scripted model serves Vertex AI's Anthropic paths (``…/models/<m>:streamRawPredict``) and a
Google OAuth token endpoint, so google-auth's own refresh runs against 127.0.0.1."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness_run import SecurityPolicy, UsageError
from harness_run.security import ModelProxy, inline_google_credentials
from harness_run.testing import ScriptedModel, shell, text

from ._attacks import MODELS, VERTEX_LOOK, vertex_key_file
from .conftest import EngineFactory


@pytest.mark.harness
async def test_claude_on_vertex_gets_the_proxy_and_never_a_google_credential(
    make_engine: EngineFactory, model: ScriptedModel, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    key = vertex_key_file(tmp_path, model)
    monkeypatch.delenv("GOOGLE_APPLICATION_CREDENTIALS", raising=False)
    engine = make_engine(
        harness="claude-code",
        model=MODELS["claude-code"],
        security_policy=SecurityPolicy(include_credential_guards=False),  # the proxy alone
    )
    session = engine.start_session()
    model.add(shell(VERTEX_LOOK), text("done"))
    result = await session.run("find the credentials", secrets=key.secrets(model))
    assert not result.is_error, result.error
    assert result.text == "done"
    key.check(model, model.requests[-1].tool_results[-1])
    stored = "".join(e.model_dump_json() for e in session.events())
    assert key.pem_line not in stored and "ya29." not in stored


async def test_a_vertex_turn_without_google_credentials_is_refused_clearly(
    model: ScriptedModel, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No ADC anywhere: the proxy answers 401 naming what to set (and the harness shows that)."""
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(tmp_path / "missing.json"))
    proxy = ModelProxy()
    env = proxy.substitute(
        "claude-code",
        {"CLAUDE_CODE_USE_VERTEX": "1", "ANTHROPIC_VERTEX_BASE_URL": f"{model.url}/v1"},
    )
    assert "GOOGLE_APPLICATION_CREDENTIALS" not in env
    await proxy.start()
    import aiohttp

    url = (
        env["ANTHROPIC_VERTEX_BASE_URL"]
        + "/projects/p/locations/global/publishers/anthropic/models/m:rawPredict"
    )
    async with aiohttp.ClientSession() as client, client.post(url, json={"messages": []}) as answer:
        assert answer.status == 401
        message = (await answer.json())["error"]["message"]
    assert "no Google credentials for Vertex AI" in message and "GOOGLE_APPLICATION_CREDENTIALS" in message
    # a request without the path token is refused before any credential is looked for
    bare = f"http://127.0.0.1:{proxy.port}/v1/projects/p/locations/global/publishers/anthropic/models/m:rawPredict"
    async with aiohttp.ClientSession() as client, client.post(bare, json={}) as answer:
        assert answer.status == 401 and "no valid turn token" in (await answer.text())
    assert not [r for r in model.requests if r.is_model_request]
    await proxy.aclose()


def test_a_key_file_of_this_machine_reaches_a_remote_worker_as_its_content(tmp_path: Path) -> None:
    """A container or a pod cannot open the client's path: a Vertex run sends the file's content
    (which the worker's proxy reads as it reads a path); other runs, and paths that are not a file
    here (one in the image), are sent as they are."""
    key = tmp_path / "sa.json"
    key.write_text('{"type": "service_account"}\n')
    vertex = {"CLAUDE_CODE_USE_VERTEX": "1", "GOOGLE_APPLICATION_CREDENTIALS": str(key)}
    inline = inline_google_credentials("claude-code", vertex)
    assert inline["GOOGLE_APPLICATION_CREDENTIALS"] == key.read_text()
    plain = {"GOOGLE_APPLICATION_CREDENTIALS": str(key)}
    assert inline_google_credentials("claude-code", plain) == plain  # not a Vertex run: the agent's own
    assert inline_google_credentials("codex", vertex) == vertex  # Vertex AI is Claude Code's switch
    gateway = {**vertex, "CLAUDE_CODE_SKIP_VERTEX_AUTH": "1"}  # the caller's own gateway: not the proxy's
    assert inline_google_credentials("claude-code", gateway) == gateway
    in_image = {**vertex, "GOOGLE_APPLICATION_CREDENTIALS": "/var/run/secrets/sa.json"}
    assert inline_google_credentials("claude-code", in_image) == in_image
    key.write_text("{" + " " * 70_000 + "}")
    with pytest.raises(UsageError, match="GOOGLE_APPLICATION_CREDENTIALS file is over 64 KiB"):
        inline_google_credentials("claude-code", vertex)
