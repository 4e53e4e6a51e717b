"""The model proxy on the real CLIs: the harness and the agent's tools get a per-turn token and the
proxy's address, never the model key; the key reaches only the model endpoint, as a header; the
token is refused anywhere but its own proxy and after its turn."""

from __future__ import annotations

import asyncio
import hashlib
import json
import urllib.error
import urllib.request

import pytest

from harness_run import SecurityPolicy
from harness_run.security import ModelProxy
from harness_run.testing import Rule, ScriptedModel, shell, text

from ._attacks import HARNESSES, MODELS, Canaries, model_secrets
from .conftest import EngineFactory

# the key, wherever the agent could look for it (with the credential guards off: the proxy alone)
LOOK = 'env | sort; echo; cat /proc/$PPID/environ | tr "\\0" "\\n"; echo; ps -o pid= -p $PPID'


@pytest.mark.harness
@pytest.mark.parametrize("harness", HARNESSES)
async def test_the_agent_never_holds_the_model_key(
    harness: str, make_engine: EngineFactory, model: ScriptedModel
) -> None:
    canaries = Canaries()
    engine = make_engine(
        harness=harness,
        model=MODELS[harness],
        security_policy=SecurityPolicy(include_credential_guards=False),  # the proxy alone
    )
    session = engine.start_session()
    model.add(shell(LOOK), text("done"))
    result = await session.run("find the key", secrets=model_secrets(harness, model, canaries.model_key))
    assert not result.is_error, result.error

    looked = model.requests[-1].tool_results[-1]
    assert "hrp-" in looked  # the harness's key variable holds the turn token …
    assert "127.0.0.1" in looked  # … and its endpoint is the proxy
    bodies = "\n".join(json.dumps(r.body) for r in model.requests)
    assert canaries.model_key not in bodies  # never reached the model through a tool
    # the endpoint itself got the real key, as the credential header, on every request
    real = hashlib.sha256(canaries.model_key.encode()).hexdigest()
    assert {r.credential_sha256 for r in model.requests} == {real}
    stored = "".join(e.model_dump_json() for e in session.events())
    assert canaries.model_key not in stored


async def test_the_turn_token_is_worthless_elsewhere_and_after_the_turn(model: ScriptedModel) -> None:
    model.add(Rule(reply=text("hello")))
    proxy = ModelProxy()
    env = proxy.substitute(
        "claude-code",
        {"ANTHROPIC_BASE_URL": model.url, "ANTHROPIC_API_KEY": "sk-real-key-123456", "PATH": "/bin"},
    )
    token = env["ANTHROPIC_API_KEY"]
    assert token.startswith("hrp-") and env["ANTHROPIC_BASE_URL"] == f"http://127.0.0.1:{proxy.port}"
    assert env["PATH"] == "/bin"
    await proxy.start()
    body = {"model": "claude-sonnet-4-6", "max_tokens": 50, "messages": [{"role": "user", "content": "hi"}]}

    def call(key: str) -> tuple[int, str]:
        request = urllib.request.Request(
            f"{env['ANTHROPIC_BASE_URL']}/v1/messages",
            data=json.dumps(body).encode(),
            headers={"x-api-key": key, "content-type": "application/json", "anthropic-version": "2023-06-01"},
        )
        try:
            with urllib.request.urlopen(request, timeout=30) as answer:
                return answer.status, answer.read().decode()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read().decode()

    status, answer = await asyncio.to_thread(call, token)
    assert status == 200 and "hello" in answer
    assert model.requests[-1].credential_sha256 == hashlib.sha256(b"sk-real-key-123456").hexdigest()
    seen = len(model.requests)
    status, answer = await asyncio.to_thread(call, "sk-real-key-123456")  # not a token of this proxy
    assert status == 401 and "no valid turn token" in answer
    assert (proxy.requests, proxy.refused, len(model.requests)) == (1, 1, seen)
    await proxy.aclose()
    with pytest.raises(urllib.error.URLError):  # the turn is over: nothing listens
        await asyncio.to_thread(urllib.request.urlopen, f"{env['ANTHROPIC_BASE_URL']}/v1/messages", None, 5)


def test_only_the_keys_the_harness_needs_reach_it_and_never_the_real_ones() -> None:
    proxy = ModelProxy()
    given = {
        "OPENAI_BASE_URL": "https://gateway.example/v1",
        "OPENAI_API_KEY": "sk-openai",
        "ANTHROPIC_API_KEY": "sk-ant",
        "OPENROUTER_API_KEY": "sk-or",
    }
    env = proxy.substitute("codex", dict(given))
    assert env["OPENAI_BASE_URL"] == f"http://127.0.0.1:{proxy.port}/v1"
    assert env["OPENAI_API_KEY"].startswith("hrp-")
    assert "ANTHROPIC_API_KEY" not in env and "OPENROUTER_API_KEY" not in env
    # OpenCode's own openai provider (no endpoint variable): a token, and the proxy's address for the
    # driver to write into the provider's baseURL
    env = proxy.substitute("opencode", {"OPENAI_API_KEY": "sk-openai", "CODEX_API_KEY": "sk-codex"})
    assert env["OPENAI_API_KEY"].startswith("hrp-") and "CODEX_API_KEY" not in env
    assert env["HARNESS_RUN_OPENCODE_OPENAI_URL"] == f"http://127.0.0.1:{proxy.port}/v1"
    # Vertex AI is left alone when the caller already skips Google auth (its own gateway holds them)
    gateway = {"CLAUDE_CODE_USE_VERTEX": "1", "CLAUDE_CODE_SKIP_VERTEX_AUTH": "1"}
    assert proxy.substitute("claude-code", dict(gateway)) == gateway
    asyncio.run(proxy.aclose())


@pytest.mark.harness
async def test_a_claude_subscription_token_goes_through_the_proxy_too(
    make_engine: EngineFactory, model: ScriptedModel
) -> None:
    """``CLAUDE_CODE_OAUTH_TOKEN`` (a Claude subscription) is held by the proxy like a key: Claude
    Code sends the turn token as its bearer, the endpoint gets the real one."""
    canaries = Canaries()
    engine = make_engine(
        harness="claude-code",
        model=MODELS["claude-code"],
        security_policy=SecurityPolicy(include_credential_guards=False),
    )
    model.add(shell(LOOK), text("done"))
    secrets = {"ANTHROPIC_BASE_URL": model.url, "CLAUDE_CODE_OAUTH_TOKEN": canaries.model_key}
    result = await engine.start_session().run("find the token", secrets=secrets)
    assert not result.is_error, result.error
    looked = model.requests[-1].tool_results[-1]
    assert "CLAUDE_CODE_OAUTH_TOKEN=hrp-" in looked
    assert canaries.model_key not in "\n".join(json.dumps(r.body) for r in model.requests)
    real = hashlib.sha256(canaries.model_key.encode()).hexdigest()
    assert {r.credential_sha256 for r in model.requests if r.is_model_request} == {real}


@pytest.mark.harness
async def test_opencode_on_its_built_in_anthropic_provider_gets_only_a_turn_token(
    make_engine: EngineFactory, model: ScriptedModel
) -> None:
    """No ``OPENAI_BASE_URL``: OpenCode's own ``anthropic`` provider reads ``ANTHROPIC_API_KEY``; the
    driver points the provider's ``baseURL`` at the proxy, so the key still stays here."""
    canaries = Canaries()
    engine = make_engine(
        harness="opencode",
        model="claude-sonnet-4-6",  # -> OpenCode's anthropic/claude-sonnet-4-6
        security_policy=SecurityPolicy(include_credential_guards=False),
    )
    model.add(shell(LOOK), text("done"))
    secrets = {"ANTHROPIC_BASE_URL": model.url, "ANTHROPIC_API_KEY": canaries.model_key}
    result = await engine.start_session().run("find the key", secrets=secrets)
    assert not result.is_error, result.error
    asked = [r for r in model.requests if r.is_model_request]
    assert asked and {r.api for r in asked} == {"anthropic"}
    looked = asked[-1].tool_results[-1]
    assert "ANTHROPIC_API_KEY=hrp-" in looked
    assert canaries.model_key not in "\n".join(json.dumps(r.body) for r in model.requests)
    real = hashlib.sha256(canaries.model_key.encode()).hexdigest()
    assert {r.credential_sha256 for r in asked} == {real}


async def test_a_proxy_that_cannot_start_refuses_connections_and_stops_the_turn(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """aiohttp missing or shadowed (a stray ``attr.py`` in the working directory did it): the harness
    must not wait forever on a socket nobody serves."""
    import importlib
    import socket

    real = importlib.import_module

    def broken(name: str, package: str | None = None) -> object:
        if name == "aiohttp.web":
            raise ImportError("no module named 'attr'")
        return real(name, package)

    monkeypatch.setattr(importlib, "import_module", broken)
    proxy = ModelProxy()
    env = proxy.substitute(
        "claude-code", {"ANTHROPIC_BASE_URL": "http://127.0.0.1:9", "ANTHROPIC_API_KEY": "k"}
    )
    stopped: list[str] = []

    async def stop(reason: str) -> None:
        stopped.append(reason)

    proxy.on_failure = stop
    proxy.start_soon()
    for _ in range(500):  # poll the observable outcome (the stop), never a fixed delay
        if stopped:
            break
        await asyncio.sleep(0.01)
    assert stopped and "the model proxy could not start" in stopped[0] and "attr" in stopped[0]
    port = int(env["ANTHROPIC_BASE_URL"].rsplit(":", 1)[1])
    with pytest.raises(ConnectionRefusedError), socket.create_connection(("127.0.0.1", port), timeout=5):
        pass
    await proxy.aclose()
