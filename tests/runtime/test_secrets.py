"""Canary secrets: what the agent is given must never land in the store, the events, the history or
an exception text; and nothing of the user's own environment or ~/.claude leaks into the agent."""

from __future__ import annotations

import io
import tarfile
import uuid
from pathlib import Path

import pytest

from harness_run import SecurityPolicy
from harness_run.errors import UsageError
from harness_run.events import MessageEvent, ToolResultEvent
from harness_run.testing import ScriptedModel, error, shell, text

from ._helpers import API_KEY, model_secrets, workspace_of
from .conftest import EngineFactory

pytestmark = pytest.mark.harness


def store_contents(workdir: Path) -> dict[str, bytes]:
    """Every file of the store (SQLite db, -wal, -shm; blobs, and the members inside blob tarballs)."""
    out: dict[str, bytes] = {}
    for path in [p for p in workdir.iterdir() if p.is_file()] + list((workdir / "blobs").rglob("*")):
        if not path.is_file():
            continue
        data = path.read_bytes()
        out[str(path)] = data
        if data[:2] == b"\x1f\x8b":  # a tar.gz snapshot: search inside too
            with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
                members = tar.getmembers()
                out[f"{path}!names"] = "\n".join(f"{m.name} -> {m.linkname}" for m in members).encode()
                for member in members:
                    handle = tar.extractfile(member)
                    if handle is not None:
                        out[f"{path}!{member.name}"] = handle.read()
    return out


async def test_a_canary_secret_never_reaches_the_store_events_history_or_errors(
    model: ScriptedModel,
    make_engine: EngineFactory,
    workdir: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    canary = f"canary-{uuid.uuid4().hex}"
    key_canary = f"sk-canary-{uuid.uuid4().hex}"
    # the user's own machine: a private variable and a ~/.claude with memory and settings
    user_home = tmp_path / "user-home"
    (user_home / ".claude").mkdir(parents=True)
    (user_home / ".claude" / "CLAUDE.md").write_text("USER-MEMORY-MARKER-31337: always answer in French\n")
    (user_home / ".claude" / "settings.json").write_text(
        '{"env": {"USER_SETTINGS_MARKER": "leaked-setting"}}'
    )
    monkeypatch.setenv("HOME", str(user_home))
    monkeypatch.setenv("USER_PRIVATE_TOKEN", "user-env-leak-4242")
    home_before = sorted(p.relative_to(user_home) for p in user_home.rglob("*"))

    model.add(
        shell(
            'echo "$CANARY_SECRET" > canary.txt; echo "key=$CANARY_SECRET"; env | sort > env.txt; '
            'touch "named-$CANARY_SECRET.txt"'
        ),
        text(f"the secret was {canary}"),  # a model may well repeat what it saw
        error(500, f"upstream exploded on key {key_canary} for {canary}"),
    )
    engine = make_engine(
        checkpoint=True,
        secrets=["CANARY_SECRET", "EXTRA_SECRET"],
        env={"CLAUDE_CODE_MAX_RETRIES": "0"},
        # the agent dumps its environment on purpose: redaction is tested beneath the credential
        # guards (which would refuse `env`; tests/security checks them)
        security_policy=SecurityPolicy(include_credential_guards=False),
    )
    session = engine.start_session()
    secrets = {
        "ANTHROPIC_BASE_URL": model.url,
        "ANTHROPIC_API_KEY": key_canary,
        "CANARY_SECRET": canary,
        "EXTRA_SECRET": "extra-value-0000",
    }
    run = session.run("write the secret into canary.txt", secrets=secrets)
    result = await run
    assert not result.is_error, result.error

    # the agent really had it (so the checks below mean something)
    workspace = workspace_of(engine, session.session_id)
    assert (workspace / "canary.txt").read_text().strip() == canary
    assert any(canary in r for r in model.main_requests[1].tool_results)
    assert model.main_requests[0].headers["x-api-key"] == "***"  # recorded redacted by the test server

    # a failing turn whose error message echoes both secrets
    failed = await session.run("again", secrets=secrets)
    assert failed.is_error
    assert "upstream exploded on key ***" in (failed.error or "")

    # misuse: the exception texts name secrets, never their values
    texts: list[str] = []
    for bad in ({k: v for k, v in secrets.items() if k != "EXTRA_SECRET"}, {**secrets, "UNDECLARED": canary}):
        with pytest.raises(UsageError) as caught:
            session.run("third", secrets=bad)
        texts.append(str(caught.value))
    assert "EXTRA_SECRET" in texts[0]
    assert "UNDECLARED" in texts[1]

    seen = {
        "run events": "".join(e.model_dump_json() for e in run.events),
        "result": result.model_dump_json() + failed.model_dump_json(),
        "history": "".join(t.model_dump_json() for t in session.history()),
        "stored events": "".join(e.model_dump_json() for e in session.events()),
        "last_result": session.last_result.model_dump_json() if session.last_result else "",
        "session record": session.record.model_dump_json(),
        "exceptions": "\n".join(texts),
    }
    assert "***" in seen["run events"]  # redacted, not dropped
    store = store_contents(workdir)
    assert any("!" in name for name in store), "no checkpoint snapshot in the store"
    for value in (canary, key_canary):
        leaks = [where for where, content in seen.items() if value in content]
        leaks += [name for name, data in store.items() if value.encode() in data]
        assert leaks == [], f"secret value found in {leaks}"

    # the agent's environment: no unrelated variable of ours, its own HOME, not the user's ~/.claude
    env = dict(line.split("=", 1) for line in (workspace / "env.txt").read_text().splitlines() if "=" in line)
    assert "USER_PRIVATE_TOKEN" not in env
    assert "USER_SETTINGS_MARKER" not in env
    assert env["HOME"] == str(workdir / "sessions" / session.session_id / "home")
    assert env["CLAUDE_CONFIG_DIR"].startswith(env["HOME"])
    assert all("USER-MEMORY-MARKER" not in r.system_text + r.text for r in model.requests)
    assert sorted(p.relative_to(user_home) for p in user_home.rglob("*")) == home_before
    assert API_KEY not in env.values()


async def test_secret_values_that_are_json_tokens_or_short_words_never_break_or_mangle_a_turn(
    model: ScriptedModel, make_engine: EngineFactory
) -> None:
    """Redaction works on values, not on JSON text: a secret equal to ``false``/``null``/``type`` or
    to ``0.0,`` cannot break the event; a short one (under 8 characters) is blanked as a whole word
    only, so ``tests`` survives a secret ``test`` while ``test`` alone is blanked."""
    model.add(
        shell("echo 'tests pass: false'; echo 'the token is test'"),
        text("ran the tests; the result is false, type ok, null 0.0, done; test"),
        text("second turn fine"),
    )
    names = ["S_FALSE", "S_NULL", "S_TYPE", "S_NUM", "S_TEST"]
    engine = make_engine(secrets=names)
    session = engine.start_session()
    values = ["false", "null", "type", "0.0,", "test"]
    secrets = model_secrets(model, **dict(zip(names, values, strict=True)))
    run = session.run("run the tests", secrets=secrets)
    result = await run
    assert run.done and not result.is_error, result.error
    message = next(e.text for e in run.events if isinstance(e, MessageEvent))
    assert message == "ran the tests; the result is ***, *** ok, *** *** done; ***"
    tool_output = next(e.content for e in run.events if isinstance(e, ToolResultEvent))
    assert "tests pass: ***" in tool_output and "the token is ***" in tool_output
    again = await session.run("again", secrets=secrets)  # the session is still usable
    assert again.text == "second turn fine"
