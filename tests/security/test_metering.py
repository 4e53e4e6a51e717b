"""Usage, cost and the budget from the wire: the model proxy reads every answer the endpoint sends
(streamed or not, on the Anthropic and OpenAI APIs) and the turn's result carries what it read; a
request that would pass the budget is refused there and the turn ends naming the budget — on the
real CLIs against the scripted model."""

from __future__ import annotations

import json
import logging

import pytest

from harness_run.events import Usage
from harness_run.security import ModelProxy
from harness_run.testing import ScriptedModel, shell, text
from harness_run.testing import Usage as WireUsage
from harness_run.vocab.pricing import price

from ._attacks import HARNESSES, MODELS, model_secrets
from .conftest import EngineFactory


def _wire_totals(model: ScriptedModel) -> tuple[Usage, float]:
    """What the endpoint reported over the turn (every answered request: main and side), priced
    by the model each request asked for."""
    total, cost = Usage(), 0.0
    for request in model.requests:
        if request.reply is None or request.outcome not in ("script", "rule", "side", "exhausted"):
            continue
        u = request.reply.usage
        if request.api == "anthropic":  # no reasoning count on this API
            usage = Usage(
                input_tokens=u.input_tokens,
                output_tokens=u.output_tokens,
                cache_read_tokens=u.cache_read_tokens,
                cache_write_tokens=u.cache_write_tokens,
            )
        else:  # OpenAI's output total includes reasoning; it has no cache writes
            usage = Usage(
                input_tokens=u.input_tokens,
                output_tokens=u.output_tokens - u.reasoning_tokens,
                cache_read_tokens=u.cache_read_tokens,
                reasoning_tokens=u.reasoning_tokens,
            )
        total += usage
        cost += price(request.model or "", usage) or 0.0
    return total, round(cost, 8)


@pytest.mark.harness
@pytest.mark.parametrize("harness", HARNESSES)
async def test_the_result_carries_the_usage_and_cost_metered_on_the_wire(
    harness: str, make_engine: EngineFactory, model: ScriptedModel, caplog: pytest.LogCaptureFixture
) -> None:
    engine = make_engine(harness=harness, model=MODELS[harness])
    first = WireUsage(input_tokens=1200, output_tokens=90, cache_read_tokens=300, cache_write_tokens=40)
    last = WireUsage(input_tokens=1500, output_tokens=30, cache_read_tokens=700, reasoning_tokens=11)
    model.add(shell("echo metered", usage=first), text("done", usage=last))
    caplog.set_level(logging.INFO, logger="harness_run.security")
    session = engine.start_session()
    result = await session.run("meter me", secrets=model_secrets(harness, model, "sk-metering-key-0123"))
    assert not result.is_error, result.error

    usage, cost = _wire_totals(model)
    assert model.remaining == 0 and usage.input_tokens >= 2700
    assert result.usage == usage  # every request, side requests included, exactly as answered
    assert result.cost_usd == pytest.approx(cost, abs=1e-8)
    stored = session.history()[-1].result
    assert stored is not None and stored.usage == usage and stored.cost_usd == result.cost_usd
    # when the harness's own figure differs, the proxy's wins and the difference is logged
    differ = [r.getMessage() for r in caplog.records if "the model proxy metered" in r.getMessage()]
    print(f"{harness}: wire {dict(usage)} ${cost}; harness differed: {differ}")


@pytest.mark.harness
@pytest.mark.parametrize("harness", HARNESSES)
async def test_the_request_that_would_pass_the_budget_is_refused(
    harness: str, make_engine: EngineFactory, model: ScriptedModel
) -> None:
    engine = make_engine(harness=harness, model=MODELS[harness], max_budget_usd=0.05)
    # one answer whose usage alone costs more than the budget, then one that must never be asked for
    expensive = WireUsage(input_tokens=200_000, output_tokens=50)
    model.add(shell("echo spent > spent.txt", usage=expensive), text("never sent"))
    session = engine.start_session()
    result = await session.run("spend", secrets=model_secrets(harness, model, "sk-budget-key-0123456"))

    assert result.is_error and result.stop_reason == "max_budget", result
    assert result.error is not None and "maximum budget ($0.05)" in result.error, result.error
    assert "model proxy refused" in result.error
    assert model.remaining == 1  # the next model request never reached the endpoint
    assert result.usage.input_tokens >= 200_000
    assert result.cost_usd is not None and result.cost_usd >= 0.05
    assert session.record.stop_reason == "max_budget"


async def test_the_meter_reads_json_answers_and_refuses_past_the_budget(model: ScriptedModel) -> None:
    """Non-streamed answers on both APIs, priced per model; once spent, the next call is refused."""
    model.add(
        text("a", usage=WireUsage(input_tokens=1000, output_tokens=100, cache_read_tokens=10)),
        text("b", usage=WireUsage(input_tokens=2000, output_tokens=200, reasoning_tokens=20)),
        text("never"),
    )
    proxy = ModelProxy(budget=0.0049)
    env = proxy.substitute(
        "claude-code", {"ANTHROPIC_BASE_URL": model.url, "ANTHROPIC_API_KEY": "sk-m-123456"}
    )
    openai = ModelProxy()  # another proxy for the OpenAI side: one route per API
    oenv = openai.substitute("codex", {"OPENAI_BASE_URL": model.openai_url, "OPENAI_API_KEY": "sk-o-123456"})
    try:
        await proxy.start()
        await openai.start()
        await _calls(model, proxy, env, openai, oenv)
    finally:
        await proxy.aclose()
        await openai.aclose()


async def _calls(
    model: ScriptedModel, proxy: ModelProxy, env: dict[str, str], openai: ModelProxy, oenv: dict[str, str]
) -> None:
    import asyncio
    import urllib.error
    import urllib.request

    def call(url: str, body: dict[str, object], headers: dict[str, str]) -> tuple[int, str]:
        request = urllib.request.Request(
            url, data=json.dumps(body).encode(), headers={"content-type": "application/json", **headers}
        )
        try:
            with urllib.request.urlopen(request, timeout=30) as answer:
                return answer.status, answer.read().decode()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read().decode()

    anthropic = {
        "model": "claude-sonnet-4-6",
        "max_tokens": 50,
        "messages": [{"role": "user", "content": "x"}],
    }
    key = {"x-api-key": env["ANTHROPIC_API_KEY"], "anthropic-version": "2023-06-01"}
    status, _ = await asyncio.to_thread(call, f"{env['ANTHROPIC_BASE_URL']}/v1/messages", anthropic, key)
    assert status == 200
    assert proxy.meter.usage == Usage(input_tokens=1000, output_tokens=100, cache_read_tokens=10)
    assert proxy.meter.cost_usd == price("claude-sonnet-4-6", proxy.meter.usage) == 0.004503

    responses = {"model": "gpt-5.1", "input": "x"}
    bearer = {"authorization": f"Bearer {oenv['OPENAI_API_KEY']}"}
    status, _ = await asyncio.to_thread(call, f"{oenv['OPENAI_BASE_URL']}/responses", responses, bearer)
    assert status == 200  # OpenAI's totals include cache reads and reasoning: split out
    assert openai.meter.usage == Usage(input_tokens=2000, output_tokens=180, reasoning_tokens=20)

    # 0.004503 < 0.0049: one more request is allowed; then the budget is reached
    proxy.meter.add("claude-sonnet-4-6", Usage(output_tokens=100))
    status, answer = await asyncio.to_thread(call, f"{env['ANTHROPIC_BASE_URL']}/v1/messages", anthropic, key)
    assert status == 400 and "maximum budget ($0.0049)" in answer, answer
    assert json.loads(answer)["error"]["type"] == "invalid_request_error"
    assert (proxy.over_budget, model.remaining) == (1, 1)
