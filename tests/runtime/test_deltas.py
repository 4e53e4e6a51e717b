"""Token streaming: ``delta`` events on the real CLIs against the scripted model — live in the Run,
joined equal to the message, never in history; a secret split across deltas never shows."""

from __future__ import annotations

import asyncio
import random
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from harness_run.events import AgentEvent, DeltaEvent, MessageEvent
from harness_run.security import DeltaRedactor, EventRedactor, redact_text, secret_forms
from harness_run.testing import ScriptedModel, shell, text

from ._harnesses import HARNESS
from .conftest import EngineFactory

LONG = "Streaming works: " + " ".join(f"word{i}" for i in range(40)) + "."  # several 48-char chunks
CANARY = "canary-delta-5b7d19e3c2"


async def _turn(make_engine: EngineFactory, model: ScriptedModel, harness: str, **secrets: str) -> Any:
    h = HARNESS[harness]
    engine = h.engine(make_engine, **({"secrets": list(secrets)} if secrets else {}))
    session = engine.start_session()
    run = session.run("say something long", secrets=h.secrets(model, **secrets))
    seen: list[AgentEvent] = [event async for event in run]
    result = await run
    return session, run, seen, result


@pytest.mark.harness
def test_claude_code_streams_deltas_that_join_to_the_message(
    make_engine: EngineFactory, model: ScriptedModel
) -> None:
    model.add(shell("echo hi"), text(LONG))
    session, run, seen, result = asyncio.run(_turn(make_engine, model, "claude-code"))
    assert not result.is_error, result.error
    deltas = [e for e in seen if isinstance(e, DeltaEvent)]
    assert len(deltas) >= 2
    assert "".join(d.delta for d in deltas) == LONG
    message = next(e for e in seen if isinstance(e, MessageEvent) and e.text == LONG)
    assert {d.message_id for d in deltas} == {message.message_id}
    assert seen.index(deltas[-1]) < seen.index(message)  # deltas first, then the whole message
    # live only: not in run.events, not in the stored history, stored seqs are 0..n-1
    stored = session.events()
    assert not [e for e in stored if e.type == "delta"] and not [e for e in run.events if e.type == "delta"]
    assert [e.seq for e in stored] == list(range(len(stored)))
    assert [e.seq for e in seen if e.type != "delta"] == [e.seq for e in stored]
    assert all(d.seq == seen[seen.index(d) - 1].seq for d in deltas)  # the seq of the event before


@pytest.mark.harness
def test_a_secret_split_across_deltas_never_shows(make_engine: EngineFactory, model: ScriptedModel) -> None:
    answer = f"{'Here is what the tool printed for me:':<40}{CANARY} and that is all there is to it."
    model.add(text(answer))  # 48-character chunks split the canary between two deltas
    assert CANARY[:8] in answer[:48] and CANARY not in answer[:48]
    session, _, seen, result = asyncio.run(_turn(make_engine, model, "claude-code", DELTA_TOKEN=CANARY))
    assert not result.is_error, result.error
    deltas = [e.text for e in seen if isinstance(e, DeltaEvent)]
    assert len(deltas) >= 2
    joined = "".join(deltas)
    assert CANARY not in joined and CANARY[:8] not in "".join(deltas[:1])
    assert joined == answer.replace(CANARY, "***")
    assert all(CANARY not in e.model_dump_json() for e in [*seen, *session.events()])


@pytest.mark.harness
@pytest.mark.parametrize("harness", ["codex", "opencode"])
def test_codex_and_opencode_print_no_partial_text(
    make_engine: EngineFactory, model: ScriptedModel, harness: str
) -> None:
    """Codex (`exec --json`) and OpenCode (`run --format json`) print an item's text only once it is
    complete, although the scripted model streams it in chunks: no deltas (docs/harnesses.md)."""
    model.add(text(LONG))
    _, _, seen, result = asyncio.run(_turn(make_engine, model, harness))
    assert not result.is_error, result.error
    assert [e.text for e in seen if isinstance(e, MessageEvent)] == [LONG]
    assert not [e for e in seen if isinstance(e, DeltaEvent)]


# --- the redaction of split text, on its own ---------------------------------------------------------


def _pieces(value: str, cuts: list[int]) -> list[str]:
    points = sorted({c % (len(value) + 1) for c in cuts})
    return [value[a:b] for a, b in zip([0, *points], [*points, len(value)], strict=True)]


@settings(max_examples=300, deadline=None)
@given(
    words=st.lists(st.sampled_from(["hello ", CANARY, " world", CANARY[:6], "\n", "x", "can"]), max_size=12),
    cuts=st.lists(st.integers(min_value=0, max_value=400), max_size=8),
)
def test_split_text_is_redacted_as_the_whole(words: list[str], cuts: list[int]) -> None:
    whole = "".join(words)
    forms = secret_forms([CANARY])
    redactor = DeltaRedactor(forms)
    joined = "".join(redactor.feed(p) for p in _pieces(whole, cuts)) + redactor.flush()
    assert joined == redact_text(whole, forms)
    assert CANARY not in joined


def test_short_secrets_stay_whole_word_rules_across_pieces() -> None:
    forms = secret_forms(["test"])
    rng = random.Random(7)
    whole = "a test, tests and test_x; test"
    for _ in range(200):
        redactor = DeltaRedactor(forms)
        cuts = [rng.randrange(len(whole) + 1) for _ in range(rng.randrange(6))]
        joined = "".join(redactor.feed(p) for p in _pieces(whole, cuts)) + redactor.flush()
        assert joined == "a ***, tests and test_x; ***"


def test_held_text_is_passed_on_before_the_next_event() -> None:
    redactor = EventRedactor(secret_forms([CANARY]))
    out: list[AgentEvent] = []
    for piece in ["before can", "ary-delta"]:  # could be the start of the canary: held back
        out += redactor.redact(DeltaEvent(text=piece, message_id="m1"))
    assert "".join(e.text for e in out if isinstance(e, DeltaEvent)) == "before "
    out += redactor.redact(MessageEvent(text="before canary-delta", message_id="m1"))
    texts = [(e.type, getattr(e, "text", "")) for e in out]
    assert texts == [("delta", "before "), ("delta", "canary-delta"), ("message", "before canary-delta")]
