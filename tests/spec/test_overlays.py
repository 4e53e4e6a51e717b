"""spec <- SessionConfig <- TurnConfig stacking through ``effective_spec``."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from harness_run import AgentSpec, SessionConfig, SystemPrompt, TurnConfig
from harness_run.errors import SpecError
from harness_run.spec import DEPLOY_ONLY_FIELDS, effective_spec

from .cases import DICT_SCHEMA, FixResult, issue_at

SPEC = AgentSpec(
    name="code-agent",
    harness="codex",
    model="gpt-5.6-luna",
    system_prompt=SystemPrompt.inherit(append="Keep changes small."),
    max_turns=5,
    max_budget_usd=1.0,
    reasoning_effort="medium",
    allowed_tools=["Read"],
    permission_mode="acceptEdits",
    output_schema=DICT_SCHEMA,
    timeout="10m",
    packages=["httpx"],
)
MULTI = AgentSpec(name="multi", harness="codex", model="gpt-5.6-luna", extra_harnesses=["claude-code"])


def test_no_overlay_returns_the_spec() -> None:
    assert effective_spec(SPEC) is SPEC
    assert effective_spec(SPEC, None, None) is SPEC
    assert effective_spec(SPEC, SessionConfig(), TurnConfig()) == SPEC


def test_unset_fields_inherit() -> None:
    eff = effective_spec(SPEC, SessionConfig(model="gpt-5.6-sol"), TurnConfig(max_turns=9))
    assert (eff.model, eff.max_turns) == ("gpt-5.6-sol", 9)
    for field in (
        "system_prompt",
        "max_budget_usd",
        "reasoning_effort",
        "allowed_tools",
        "permission_mode",
        "output_schema",
        "timeout",
        "packages",
        "name",
        "harness",
    ):
        assert getattr(eff, field) == getattr(SPEC, field), field


def test_explicit_none_clears_a_limit() -> None:
    assert effective_spec(SPEC, TurnConfig(max_turns=None)).max_turns is None
    assert effective_spec(SPEC, SessionConfig(max_budget_usd=None)).max_budget_usd is None
    assert effective_spec(SPEC, TurnConfig.from_dict({"reasoning_effort": None})).reasoning_effort is None
    assert effective_spec(SPEC, TurnConfig(output_schema=None)).output_schema is None


def test_turn_none_clears_a_session_limit() -> None:
    assert effective_spec(SPEC, SessionConfig(max_turns=3), TurnConfig(max_turns=None)).max_turns is None


def test_none_for_a_field_the_spec_always_has_inherits() -> None:
    """``model=None`` (e.g. ``TurnConfig(model=args.model)``) cannot clear the model: it inherits."""
    eff = effective_spec(
        SPEC,
        SessionConfig(model="gpt-5.6-sol", timeout=None),
        TurnConfig.from_dict(
            {"model": None, "system_prompt": None, "allowed_tools": None, "permission_mode": None}
        ),
    )
    assert eff.model == "gpt-5.6-sol"
    assert eff.timeout == SPEC.timeout
    assert eff.system_prompt == SPEC.system_prompt
    assert (eff.allowed_tools, eff.permission_mode) == (SPEC.allowed_tools, SPEC.permission_mode)
    assert effective_spec(MULTI, SessionConfig(harness=None)).harness == "codex"


def test_turn_overrides_session() -> None:
    session = SessionConfig(max_turns=3, reasoning_effort="low", model="gpt-5.6-sol")
    assert effective_spec(SPEC, session).max_turns == 3
    eff = effective_spec(SPEC, session, TurnConfig(max_turns=7, reasoning_effort="high"))
    assert (eff.max_turns, eff.reasoning_effort, eff.model) == (7, "high", "gpt-5.6-sol")


def test_output_schema_overlay() -> None:
    eff = effective_spec(SPEC, TurnConfig(output_schema=FixResult))
    assert eff.output_schema is FixResult
    assert eff.output_json_schema == FixResult.model_json_schema()
    other = {"type": "object", "properties": {"n": {"type": "integer"}}}
    assert effective_spec(SPEC, SessionConfig(output_schema=other)).output_schema == other


def test_bad_output_schema_in_overlay() -> None:
    with pytest.raises(SpecError) as info:
        TurnConfig(output_schema={"type": "string"})
    assert "wrap the value in an object" in issue_at(info.value, "output_schema").fix


def test_system_prompt_overlay() -> None:
    eff = effective_spec(SPEC, TurnConfig(system_prompt="You only review."))
    assert eff.system_prompt == SystemPrompt.replace("You only review.")
    eff = effective_spec(SPEC, SessionConfig(system_prompt=SystemPrompt.inherit(append="Be terse.")))
    assert eff.system_prompt == SystemPrompt(mode="inherit", text="Be terse.")


def test_timeout_overlay_accepts_durations() -> None:
    assert effective_spec(SPEC, TurnConfig(timeout="2m")).timeout == 120
    with pytest.raises(SpecError) as info:
        TurnConfig(timeout="later")
    assert info.value.paths == ["timeout"]


@pytest.mark.parametrize("field", sorted(DEPLOY_ONLY_FIELDS))
@pytest.mark.parametrize("overlay", [SessionConfig, TurnConfig])
def test_deploy_only_fields_are_refused(overlay: Any, field: str) -> None:
    with pytest.raises(SpecError) as info:
        overlay.from_dict({field: "x"})
    issue = issue_at(info.value, field)
    kind = "session" if overlay is SessionConfig else "turn"
    assert f"per {kind}" in issue.message
    assert "deploy a new spec version" in issue.fix
    assert field in str(info.value)


@pytest.mark.parametrize(
    "field", ["name", "packages", "skills", "env", "secrets", "network", "extra_harnesses"]
)
def test_deploy_only_fields_are_refused_as_keywords(field: str) -> None:
    with pytest.raises(SpecError) as info:
        SessionConfig(**{field: []})
    assert info.value.paths == [field]


def test_deploy_only_fields_cover_the_image() -> None:
    assert {
        "name",
        "packages",
        "skills",
        "env",
        "secrets",
        "network",
        "extra_harnesses",
        "mcp_servers",
        "repos",
        "resources",
        "system_packages",
        "setup_script",
    } <= DEPLOY_ONLY_FIELDS
    overlay_fields = set(SessionConfig.model_fields) | set(TurnConfig.model_fields)
    assert not overlay_fields & DEPLOY_ONLY_FIELDS
    # everything else on the spec can be overlaid; a session also picks its branch and workspace (not spec fields)
    session_only = {"branch", "base_branch", "workspace"}
    assert set(AgentSpec.model_fields) - DEPLOY_ONLY_FIELDS == set(SessionConfig.model_fields) - session_only


@pytest.mark.parametrize("overlay", [SessionConfig, TurnConfig])
def test_unknown_keys_fail(overlay: Any) -> None:
    with pytest.raises(SpecError) as info:
        overlay.from_dict({"max_turn": 3})
    assert "check the spelling" in issue_at(info.value, "max_turn").fix
    with pytest.raises(SpecError):
        overlay(max_tokens=3)


def test_overlay_value_errors_name_the_field() -> None:
    with pytest.raises(SpecError) as info:
        TurnConfig.from_dict({"max_turns": 0, "reasoning_effort": "extreme", "permission_mode": "yolo"})
    assert set(info.value.paths) == {"max_turns", "reasoning_effort", "permission_mode"}


def test_session_harness_must_be_baked_in() -> None:
    with pytest.raises(SpecError) as info:
        effective_spec(SPEC, SessionConfig(harness="claude-code", model="claude-sonnet-4-6"))
    issue = issue_at(info.value, "harness")
    assert "extra_harnesses=['claude-code']" in issue.fix
    eff = effective_spec(MULTI, SessionConfig(harness="claude-code", model="claude-sonnet-4-6"))
    assert (eff.harness, eff.model, eff.harnesses) == (
        "claude-code",
        "claude-sonnet-4-6",
        ("claude-code", "codex"),
    )
    assert effective_spec(MULTI, SessionConfig(harness="codex")).harness == "codex"


def test_unknown_session_harness_is_refused() -> None:
    with pytest.raises(SpecError) as info:
        SessionConfig(harness="cursor")
    assert info.value.paths == ["harness"]


@pytest.mark.parametrize("value", ["codex", "claude-code", None])
def test_turn_harness_is_refused(value: Any) -> None:
    with pytest.raises(SpecError) as info:
        TurnConfig(harness=value)
    issue = issue_at(info.value, "harness")
    assert "SessionConfig(harness=" in issue.fix


@pytest.mark.parametrize(
    ("spec", "overlays", "fix"),
    [
        (SPEC, [SessionConfig(model="claude-sonnet-4-6")], "harness='claude-code'"),
        (SPEC, [TurnConfig(model="opus")], "harness='claude-code'"),
        (MULTI, [SessionConfig(harness="claude-code")], "harness='codex'"),  # keeps the codex model
        (
            MULTI,
            [SessionConfig(harness="claude-code", model="claude-sonnet-4-6"), TurnConfig(model="gpt-5")],
            "harness='codex'",
        ),
    ],
    ids=["session-model", "turn-model", "session-harness", "turn-model-after-session-harness"],
)
def test_model_harness_mismatch_from_overlay(spec: AgentSpec, overlays: list[Any], fix: str) -> None:
    with pytest.raises(SpecError) as info:
        effective_spec(spec, *overlays)
    assert fix in issue_at(info.value, "model").fix
    assert "session/turn config" in str(info.value)


def test_tool_overlap_introduced_by_overlay_is_caught() -> None:
    spec = AgentSpec(name="a", harness="codex", model="gpt-5", disallowed_tools=["Bash"])
    with pytest.raises(SpecError) as info:
        effective_spec(spec, TurnConfig(allowed_tools=["Bash"]))
    assert info.value.paths == ["disallowed_tools"]
    assert effective_spec(spec, TurnConfig(allowed_tools=["Bash"], disallowed_tools=[])).allowed_tools == (
        "Bash",
    )


def test_overlay_to_dict_has_only_the_set_fields() -> None:
    assert SessionConfig().to_dict() == {}
    assert TurnConfig(max_turns=None).to_dict() == {"max_turns": None}
    assert TurnConfig(system_prompt="Be terse.", timeout="2m").to_dict() == {
        "system_prompt": {"mode": "replace", "text": "Be terse."},
        "timeout": 120.0,
    }
    assert SessionConfig(output_schema=FixResult, harness="codex").to_dict() == {
        "output_schema": FixResult.model_json_schema(),
        "harness": "codex",
    }


@pytest.mark.parametrize(
    "overlay",
    [
        SessionConfig(model="gpt-5", max_turns=None, harness="codex"),
        TurnConfig(allowed_tools=["Read"]),
        TurnConfig(output_schema=DICT_SCHEMA, reasoning_effort="low"),
        TurnConfig(system_prompt="x"),
        SessionConfig(),
    ],
)
def test_overlay_round_trip(overlay: Any) -> None:
    again = type(overlay).from_dict(overlay.to_dict())
    assert again == overlay
    assert again.model_fields_set == overlay.model_fields_set
    assert effective_spec(SPEC, again) == effective_spec(SPEC, overlay)


def test_overlays_are_frozen() -> None:
    config = TurnConfig(max_turns=3)
    with pytest.raises(ValidationError):
        config.max_turns = 4  # type: ignore[misc]
    assert config.max_turns == 3


def test_overlay_does_not_change_the_spec() -> None:
    before = SPEC.to_dict()
    effective_spec(SPEC, SessionConfig(model="gpt-5.6-sol"), TurnConfig(max_turns=None))
    assert SPEC.to_dict() == before


def test_git_options_overlay_per_session_and_turn_and_bad_ones_name_the_field() -> None:
    core: dict[str, Any] = {"name": "a", "harness": "codex", "model": "gpt-5.6-luna"}
    spec = AgentSpec.from_dict({**core, "git": {"commit": "after_turn", "author": "Ada <ada@example.com>"}})
    assert spec.git is not None and (spec.git.author_name, spec.git.author_email) == (
        "Ada",
        "ada@example.com",
    )
    assert AgentSpec.from_yaml(spec.to_yaml()) == spec
    session = SessionConfig(branch="feat/x", base_branch="main", git={"commit": "on_close", "push": True})
    assert SessionConfig.from_dict(session.to_dict()) == session  # the record keeps the branch
    assert effective_spec(spec, session).git == session.git  # an overlay's git replaces the spec's
    turn = effective_spec(spec, session, TurnConfig(git={"commit": "never"}))
    assert turn.git is not None and turn.git.commit == "never"
    bad = [
        ({"push": True}, "git.push", "commit"),
        ({"author": "nobody"}, "git.author", "<ada@example.com>"),
        ({"message": "{nope}"}, "git.message", "{turn}"),
        ({"commit": "sometimes"}, "git.commit", ""),
    ]
    for options, path, fix in bad:
        with pytest.raises(SpecError) as info:
            AgentSpec.from_dict({**core, "git": options})
        assert info.value.issues[0].path == path and fix in info.value.issues[0].fix, info.value
    with pytest.raises(SpecError) as info:
        SessionConfig(base_branch="main")
    assert info.value.issues[0].path == "base_branch"
    with pytest.raises(SpecError) as info:
        SessionConfig.from_dict({"branch": "no..dots"})
    assert info.value.issues[0].path == "branch"
