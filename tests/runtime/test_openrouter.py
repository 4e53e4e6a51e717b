"""Either harness with a model served through OpenRouter: `vendor/model` ids plus OPENROUTER_API_KEY.

The scripted model stands in for OpenRouter through OPENROUTER_BASE_URL (the override a proxy would
use too); the real CLIs make the requests.
"""

from __future__ import annotations

import pytest

from harness_run.testing import ScriptedModel, text

from .conftest import EngineFactory

pytestmark = pytest.mark.harness

KEY = "or-test-key-0123456789"


async def test_claude_code_through_openrouter(model: ScriptedModel, make_engine: EngineFactory) -> None:
    model.add(text("routed"))
    engine = make_engine(model="anthropic/claude-sonnet-4.6")
    result = await engine.start_session().run(
        "hi", secrets={"OPENROUTER_API_KEY": KEY, "OPENROUTER_BASE_URL": model.openai_url}
    )
    assert result.text == "routed", result.error
    (request,) = model.main_requests
    assert request.api == "anthropic"
    assert request.json["model"] == "anthropic/claude-sonnet-4.6"
    assert request.headers.get("authorization") == "***"  # the bearer token (values are redacted)
    assert not request.headers.get("x-api-key")  # no Anthropic key sent to OpenRouter


async def test_codex_through_openrouter(make_engine: EngineFactory) -> None:
    with ScriptedModel([text("routed too")]) as model:
        engine = make_engine(
            harness="codex", model="openai/gpt-5.1", env={"HARNESS_RUN_CODEX_MAX_RETRIES": "0"}
        )
        result = await engine.start_session().run(
            "hi", secrets={"OPENROUTER_API_KEY": KEY, "OPENROUTER_BASE_URL": model.openai_url}
        )
        assert result.text == "routed too", result.error
        (request,) = model.main_requests
        assert request.api == "responses"
        assert request.json["model"] == "openai/gpt-5.1"
        assert request.headers.get("authorization") == "***"


async def test_an_explicit_endpoint_wins_over_openrouter(
    model: ScriptedModel, make_engine: EngineFactory
) -> None:
    model.add(text("direct"))
    engine = make_engine(model="anthropic/claude-sonnet-4.6")
    result = await engine.start_session().run(
        "hi",
        secrets={
            "OPENROUTER_API_KEY": KEY,
            "OPENROUTER_BASE_URL": "http://127.0.0.1:9/v1",  # nothing listens there
            "ANTHROPIC_BASE_URL": model.url,
            "ANTHROPIC_API_KEY": "direct-key",
        },
    )
    assert result.text == "direct", result.error
