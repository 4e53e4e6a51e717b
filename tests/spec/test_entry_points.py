"""Every way into a spec reports bad input as one SpecError (field path + fix), never pydantic's
ValidationError: construction, ``model_validate*``, ``from_dict``/``from_yaml``, the overlays and
their application, the value types, and the CLI. And the spec package uses public pydantic only."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel, ValidationError

import harness_run.spec
from harness_run import AgentSpec, Secret, SessionConfig, TurnConfig
from harness_run.cli import main
from harness_run.errors import SpecError
from harness_run.spec import GitRepo, Network, RemoteMcpServer, effective_spec

from .cases import issue_at

GOOD: dict[str, Any] = {"name": "code-agent", "harness": "codex", "model": "gpt-5.6-luna"}
BAD: dict[str, Any] = {**GOOD, "model": "gpt 5", "secrets": [{"name": "PATH"}], "max_turns": 0}
BAD_PATHS = {"model", "secrets[0].name", "max_turns"}
SPEC = AgentSpec(**GOOD)


def _yaml_file(tmp_path: Path) -> Path:
    path = tmp_path / "agent.yaml"
    path.write_text(json.dumps(BAD))
    return path


SPEC_ROUTES: dict[str, Callable[[Path], object]] = {
    "constructor": lambda _: AgentSpec(**BAD),
    "model_validate": lambda _: AgentSpec.model_validate(BAD),
    "model_validate_json": lambda _: AgentSpec.model_validate_json(json.dumps(BAD)),
    "model_validate_strings": lambda _: AgentSpec.model_validate_strings({**BAD, "secrets": []}),
    "from_dict": lambda _: AgentSpec.from_dict(BAD),
    "from_yaml-text": lambda _: AgentSpec.from_yaml(json.dumps(BAD) + "\n"),
    "from_yaml-file": lambda tmp: AgentSpec.from_yaml(_yaml_file(tmp)),
    "from_yaml-path-str": lambda tmp: AgentSpec.from_yaml(str(_yaml_file(tmp))),
}


@pytest.mark.parametrize("route", list(SPEC_ROUTES))
def test_every_spec_entry_point_raises_spec_error(route: str, tmp_path: Path) -> None:
    with pytest.raises(SpecError) as info:
        SPEC_ROUTES[route](tmp_path)
    err = info.value
    assert not isinstance(err, ValidationError)
    assert err.__cause__ is None and err.__suppress_context__
    expected = {"model", "max_turns"} if route == "model_validate_strings" else BAD_PATHS
    assert expected <= set(err.paths), err
    assert all(issue.fix for issue in err.issues), err
    if route.startswith(("from_yaml-file", "from_yaml-path")):
        assert err.source is not None and err.source.endswith("agent.yaml")


OVERLAY_ROUTES: dict[str, tuple[Callable[[], object], str]] = {
    "session-constructor": (lambda: SessionConfig(max_turns=0), "max_turns"),
    "session-model_validate": (lambda: SessionConfig.model_validate({"timeout": "soon"}), "timeout"),
    "session-from_dict": (lambda: SessionConfig.from_dict({"packages": ["x"]}), "packages"),
    "turn-constructor": (lambda: TurnConfig(model=" "), "model"),
    "turn-model_validate_json": (lambda: TurnConfig.model_validate_json('{"max_turns": -1}'), "max_turns"),
    "turn-from_dict": (lambda: TurnConfig.from_dict({"harness": "codex"}), "harness"),
    "effective_spec": (lambda: effective_spec(SPEC, SessionConfig(harness="claude-code")), "harness"),
    "effective_spec-tools": (
        lambda: effective_spec(SPEC, TurnConfig(allowed_tools=["Bash"], disallowed_tools=["Bash"])),
        "disallowed_tools",
    ),
    "effective_spec-model": (
        lambda: effective_spec(
            AgentSpec(**GOOD, extra_harnesses=["claude-code"]), SessionConfig(harness="claude-code")
        ),
        "model",
    ),
}


@pytest.mark.parametrize("route", list(OVERLAY_ROUTES))
def test_every_overlay_entry_point_raises_spec_error(route: str) -> None:
    load, path = OVERLAY_ROUTES[route]
    with pytest.raises(SpecError) as info:
        load()
    assert not isinstance(info.value, ValidationError)
    assert info.value.__cause__ is None
    assert issue_at(info.value, path).fix


VALUE_ROUTES: dict[str, Callable[[], object]] = {
    "secret-positional": lambda: Secret("no-dashes"),
    "secret-model_validate": lambda: Secret.model_validate({"name": "LD_PRELOAD"}),
    "secret-from_dict": lambda: Secret.from_dict("not a mapping"),
    "repo-model_validate_json": lambda: GitRepo.model_validate_json('{"url": "ext::sh -c id"}'),
    "network-model_validate": lambda: Network.model_validate(["not a host!"]),
    "remote-mcp-constructor": lambda: RemoteMcpServer(name="x", url="ftp://x"),
}


@pytest.mark.parametrize("route", list(VALUE_ROUTES))
def test_value_types_raise_spec_error_on_every_route(route: str) -> None:
    with pytest.raises(SpecError) as info:
        VALUE_ROUTES[route]()
    assert not isinstance(info.value, ValidationError)
    assert all(issue.path and issue.fix for issue in info.value.issues)


def test_non_string_keys_are_unknown_keys_at_every_level() -> None:
    """Pydantic calls a nested model's __init__ with its mapping as keywords: keys that are not
    strings must be reported, not end in Python's TypeError."""
    cases: list[tuple[dict[Any, Any], str]] = [
        ({**GOOD, None: 1}, "[None]"),
        ({**GOOD, "resources": {1: "2"}}, "resources[1]"),
        ({**GOOD, "secrets": ["A", {None: "B"}]}, "secrets[1][None]"),
        ({**GOOD, "system_prompt": {True: "x"}}, "system_prompt[True]"),
    ]
    for data, path in cases:
        for load in (AgentSpec.from_dict, AgentSpec.model_validate):
            with pytest.raises(SpecError) as info:
                load(data)
            assert issue_at(info.value, path).message.startswith("unknown key")
    with pytest.raises(SpecError):
        TurnConfig.from_dict({"system_prompt": {1: 2}})


def test_a_spec_inside_a_users_own_model_reports_our_message() -> None:
    """Inside someone else's pydantic model the error is theirs (a ValidationError), carrying ours."""

    class Deployment(BaseModel):
        spec: AgentSpec

    with pytest.raises(ValidationError) as info:
        Deployment.model_validate({"spec": {**GOOD, "name": "Bad_Name"}})
    assert "name: 'Bad_Name' is not a valid agent name" in str(info.value)
    assert Deployment.model_validate({"spec": GOOD}).spec == SPEC


def test_secret_positional_forms() -> None:
    assert Secret("GH_TOKEN", required=False) == Secret(name="GH_TOKEN", required=False)
    assert Secret("GH_TOKEN").required
    with pytest.raises(TypeError):
        Secret("A", True)  # type: ignore[misc]  # only the name is positional
    with pytest.raises(TypeError):
        Secret("A", name="B")  # type: ignore[misc]


def test_cli_validate_exits_2_with_field_paths_and_no_traceback(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bomb = tmp_path / "bomb.yaml"
    bomb.write_text("name: a\nharness: codex\nmodel: gpt-5\nenv: &a {A: '1'}\nx: *a\n")
    for path in (_yaml_file(tmp_path), bomb):
        assert main(["validate", str(path)]) == 2
        err = capsys.readouterr().err
        assert err.startswith("error: invalid spec in ")
        assert "Traceback" not in err and "pydantic" not in err and "validation error" not in err
    assert main(["validate", str(_yaml_file(tmp_path))]) == 2
    err = capsys.readouterr().err
    for path in BAD_PATHS:
        assert f"  - {path}: " in err
    good = tmp_path / "good.yaml"
    good.write_text(json.dumps(GOOD))
    assert main(["validate", str(good)]) == 0


def test_the_spec_package_uses_public_pydantic_only() -> None:
    package = Path(harness_run.spec.__file__).parent
    for module in sorted(package.glob("*.py")):
        text = module.read_text()
        assert not re.search(r"pydantic(_core)?\._", text), f"{module.name} imports pydantic internals"
        assert "object.__setattr__" not in text, f"{module.name} mutates a frozen model"
        assert "__pydantic_" not in text, f"{module.name} relies on pydantic's private attributes"
