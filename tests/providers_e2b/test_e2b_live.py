"""Opt-in: ``provider="e2b"`` on real E2B (marker ``cloud``, deselected unless
``HARNESS_RUN_CLOUD_TESTS=1``). Needs ``E2B_API_KEY``, ``ANTHROPIC_API_KEY`` and a history store the
sandboxes reach: ``HARNESS_RUN_E2B_LIVE_STORE=gs://bucket/prefix`` with ``GOOGLE_APPLICATION_CREDENTIALS``
here, and ``HARNESS_RUN_E2B_LIVE_SANDBOX_ENV`` (``NAME=value,…``) for what the sandboxes need to reach
it. The template is built from ``python:3.12-slim-bookworm`` on E2B's builders."""

from __future__ import annotations

import os

import pytest

from harness_run.harnessbox import HarnessBox
from harness_run.runtime.e2b import E2BProvider

pytestmark = pytest.mark.cloud


async def test_a_turn_pauses_resumes_and_kill_deletes_on_real_e2b() -> None:
    key, store = os.environ.get("E2B_API_KEY"), os.environ.get("HARNESS_RUN_E2B_LIVE_STORE")
    model_key = os.environ.get("ANTHROPIC_API_KEY")
    if not key or not store or not model_key:
        pytest.skip("set E2B_API_KEY, ANTHROPIC_API_KEY and HARNESS_RUN_E2B_LIVE_STORE for the live E2B test")
    pairs = [
        p.split("=", 1) for p in os.environ.get("HARNESS_RUN_E2B_LIVE_SANDBOX_ENV", "").split(",") if "=" in p
    ]
    provider = E2BProvider(store=store, pause_after=1.0, sandbox_env=dict(pairs))
    hb = HarnessBox(
        provider=provider,
        harness="claude-code",
        secrets={"provider_api_key": key, "harness_secrets": {"ANTHROPIC_API_KEY": model_key}},
    )
    session = await hb.create_session()
    first = await session.send_message("Write the word ready to ready.txt, then say done.", stream=False)
    assert not first.is_error, first.text
    engine = hb.engine
    assert engine is not None
    claims = engine.claims  # pyright: ignore[reportAttributeAccessIssue, reportUnknownMemberType, reportUnknownVariableType]
    assert await claims.pause_now(session.session_id)  # pyright: ignore[reportUnknownMemberType]
    second = await session.run_command("cat ready.txt")
    assert "ready" in second.stdout
    assert claims.resumes == 1  # pyright: ignore[reportUnknownMemberType]
    await hb.kill()
    assert not await claims.has_sandbox(session.session_id)  # pyright: ignore[reportUnknownMemberType]
