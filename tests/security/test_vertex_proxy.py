"""Claude Code on Vertex AI through the model proxy, on the real CLI: the proxy holds the Google
credentials and adds a fresh access token to each request; Claude Code gets the proxy's address with
a per-turn path token and never a Google credential (file, refresh token or access token).

The scripted model serves Vertex AI's Anthropic paths (``…/models/<m>:streamRawPredict``) and a
Google OAuth token endpoint, so google-auth's own refresh runs against 127.0.0.1."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from harness_run import SecurityPolicy
from harness_run.security import ModelProxy
from harness_run.testing import ScriptedModel, shell, text

from ._attacks import MODELS
from .conftest import EngineFactory

LOOK = 'env | sort; echo; cat /proc/$PPID/environ | tr "\\0" "\\n"; echo; ls -la ~ ~/.config 2>&1'
KEY_ID = "canary-key-id-51d0e2"


def _adc(tmp_path: Path, model: ScriptedModel) -> tuple[Path, str]:
    """A service-account key file (a fresh RSA key) whose token endpoint is the scripted model's:
    google-auth signs a real JWT grant and gets an access token there. Returns the path and the
    key's PEM body (the canary)."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa

    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    ).decode()
    path = tmp_path / "sa.json"
    info = {
        "type": "service_account",
        "project_id": "canary-project",
        "private_key_id": KEY_ID,
        "private_key": pem,
        "client_email": "agent@canary-project.iam.gserviceaccount.com",
        "client_id": "1",
        "token_uri": f"{model.url}/token",
    }
    path.write_text(json.dumps(info))
    path.chmod(0o600)
    return path, pem.splitlines()[1]


@pytest.mark.harness
async def test_claude_on_vertex_gets_the_proxy_and_never_a_google_credential(
    make_engine: EngineFactory, model: ScriptedModel, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    adc, pem_line = _adc(tmp_path, model)
    monkeypatch.delenv("GOOGLE_APPLICATION_CREDENTIALS", raising=False)
    engine = make_engine(
        harness="claude-code",
        model=MODELS["claude-code"],
        security_policy=SecurityPolicy(include_credential_guards=False),  # the proxy alone
    )
    session = engine.start_session()
    model.add(shell(LOOK), text("done"))
    vertex = {
        "CLAUDE_CODE_USE_VERTEX": "1",
        "ANTHROPIC_VERTEX_PROJECT_ID": "canary-project",
        "CLOUD_ML_REGION": "us-east5",
        "ANTHROPIC_VERTEX_BASE_URL": f"{model.url}/v1",  # where Vertex AI is (the proxy's upstream)
        "GOOGLE_APPLICATION_CREDENTIALS": str(adc),  # this run's key file, for the proxy only
    }
    result = await session.run("find the credentials", secrets=vertex)
    assert not result.is_error, result.error
    assert result.text == "done"

    turns = [r for r in model.requests if r.is_model_request]
    assert turns and all(
        r.path.startswith("/v1/projects/canary-project/locations/us-east5/publishers/anthropic/models/")
        for r in turns
    ), [r.path for r in turns]
    # every model request carried an access token google-auth got from the token endpoint (the
    # proxy's refresh, not one the harness made: it has no credential to refresh with)
    issued = {hashlib.sha256(f"ya29.scripted-{n}".encode()).hexdigest() for n in range(1, 10)}
    assert {r.credential_sha256 for r in turns} <= issued
    assert [r for r in model.requests if r.path == "/token"]  # google-auth refreshed there

    looked = turns[-1].tool_results[-1]
    assert "CLAUDE_CODE_SKIP_VERTEX_AUTH=1" in looked
    assert "ANTHROPIC_VERTEX_BASE_URL=http://127.0.0.1:" in looked and "/hrp-" in looked
    assert "GOOGLE_APPLICATION_CREDENTIALS" not in looked and str(adc) not in looked
    everything = "\n".join(json.dumps(r.body) for r in model.requests)
    for canary in (pem_line, KEY_ID, "ya29.scripted-"):
        assert canary not in everything  # no Google credential ever reached the agent's tools
    stored = "".join(e.model_dump_json() for e in session.events())
    assert pem_line not in stored and "ya29." not in stored


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
