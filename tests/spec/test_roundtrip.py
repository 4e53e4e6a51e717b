"""to_dict/from_dict and to_yaml/from_yaml round trips, YAML loading errors, the exported JSON Schema."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml
from pydantic import ValidationError

from harness_run import AgentSpec
from harness_run.errors import SpecError

from .cases import GOOD, FixResult

GOOD_IDS = list(GOOD)


def _has_class_schema(spec: AgentSpec) -> bool:
    return isinstance(spec.output_schema, type)


@pytest.mark.parametrize("name", GOOD_IDS)
def test_dict_round_trip(name: str) -> None:
    spec = GOOD[name]()
    data = spec.to_dict()
    again = AgentSpec.from_dict(data)
    if _has_class_schema(spec):
        assert again.output_schema == FixResult.model_json_schema()
        assert again.to_dict() == data
        assert again == spec.model_copy(update={"output_schema": FixResult.model_json_schema()})
    else:
        assert again == spec
    assert AgentSpec.from_dict(again.to_dict()) == again


@pytest.mark.parametrize("name", GOOD_IDS)
def test_yaml_round_trip(name: str) -> None:
    spec = GOOD[name]()
    text = spec.to_yaml()
    again = AgentSpec.from_yaml(text)
    assert again == AgentSpec.from_dict(spec.to_dict())
    assert again.to_yaml() == text


@pytest.mark.parametrize("name", GOOD_IDS)
def test_exclude_defaults_round_trip(name: str) -> None:
    spec = GOOD[name]()
    assert AgentSpec.from_dict(spec.to_dict(exclude_defaults=True)) == AgentSpec.from_dict(spec.to_dict())


def test_to_dict_is_plain_json_data() -> None:
    data = GOOD["readme-repo-fixer"]().to_dict()
    assert yaml.safe_load(yaml.safe_dump(data)) == data  # only plain types (no tuples/models)
    assert data["output_schema"] is None
    assert GOOD["output-schema-class"]().to_dict()["output_schema"] == FixResult.model_json_schema()


def test_to_yaml_omits_defaults() -> None:
    text = GOOD["readme-codex"]().to_yaml()
    assert yaml.safe_load(text) == {
        "name": "code-agent",
        "harness": "codex",
        "model": "gpt-5.6-luna",
        "checkpoint": True,
    }


def test_to_yaml_writes_file_and_from_yaml_reads_path(tmp_path: Path) -> None:
    spec = GOOD["readme-repo-fixer"]()
    path = tmp_path / "agent.yaml"
    text = spec.to_yaml(path)
    assert path.read_text(encoding="utf-8") == text
    assert AgentSpec.from_yaml(path) == spec
    assert AgentSpec.from_yaml(str(path)) == spec


def test_from_yaml_text_handwritten_shorthands() -> None:
    spec = AgentSpec.from_yaml(
        """
        name: repo-fixer
        harness: codex
        model: gpt-5.6-luna
        system_prompt: {append: Keep changes small.}
        skills: [{url: "https://github.com/zytedata/codex-skills"}]
        repos:
          - url: https://github.com/acme/some-repo
            ref: main
            auth: GH_TOKEN
        mcp_servers:
          - {name: search, url: "https://mcp.example.com", header_secrets: {Authorization: SEARCH_AUTH}}
          - {name: db, command: npx, args: [-y, db-mcp], env_secrets: {DATABASE_URL: DB_URL}}
        secrets: [OPENAI_API_KEY]
        network: [pypi.org]
        timeout: 30m
        """.replace("\n        ", "\n")
    )
    assert spec.system_prompt.mode == "inherit"
    assert spec.system_prompt.text == "Keep changes small."
    assert [type(m).__name__ for m in spec.mcp_servers] == ["RemoteMcpServer", "StdioMcpServer"]
    assert spec.secret_names == ("OPENAI_API_KEY", "GH_TOKEN", "SEARCH_AUTH", "DB_URL")
    assert spec.timeout == 1800
    assert spec.network.allow_hosts == ("pypi.org",)


def test_error_from_a_file_names_the_file(tmp_path: Path) -> None:
    path = tmp_path / "broken.yaml"
    path.write_text("name: code-agent\nharness: codex\nmodel: gpt-5\nmodle: x\n", encoding="utf-8")
    with pytest.raises(SpecError) as info:
        AgentSpec.from_yaml(path)
    assert info.value.source == str(path)
    assert str(path) in str(info.value)
    assert info.value.paths == ["modle"]


def test_duplicate_yaml_keys_are_refused_with_line() -> None:
    with pytest.raises(SpecError) as info:
        AgentSpec.from_yaml("name: code-agent\nharness: codex\nmodel: gpt-5\nname: other\n")
    assert info.value.paths == ["line 4, column 1"]
    assert "duplicate key 'name'" in str(info.value)


def test_duplicate_nested_yaml_keys_are_refused() -> None:
    with pytest.raises(SpecError) as info:
        AgentSpec.from_yaml("name: a\nharness: codex\nmodel: gpt-5\nenv:\n  A: '1'\n  A: '2'\n")
    assert info.value.paths == ["line 6, column 3"]


@pytest.mark.parametrize(
    ("text", "where"),
    [
        ("name: [a\n", "line 2, column 1"),
        ("name: a\n  harness: b: c\n", "line 2, column 10"),
        ("a: 'x\n", "line 2, column 1"),
        ("\tname: a\n", "line 1, column 1"),
    ],
)
def test_invalid_yaml_reports_line_and_column(text: str, where: str) -> None:
    with pytest.raises(SpecError) as info:
        AgentSpec.from_yaml(text)
    assert info.value.paths == [where]
    assert "not valid YAML" in str(info.value)
    assert "fix the YAML syntax" in str(info.value)


@pytest.mark.parametrize("text", ["- name: a\n- harness: codex\n", "just a string", "42", "", "null", "~"])
def test_yaml_top_level_must_be_a_mapping(text: str) -> None:
    with pytest.raises(SpecError) as info:
        AgentSpec.from_yaml(text)
    assert info.value.issues[0].path
    assert "expected a mapping" in str(info.value)
    assert "key: value" in info.value.issues[0].fix


@pytest.mark.parametrize(
    "text", ["!!timestamp", "a: !!int abc", "a: !!float x", "a: !!bool maybe", "a: !!timestamp 2024-13-45"]
)
def test_bad_tagged_yaml_values_are_spec_errors(text: str) -> None:
    with pytest.raises(SpecError) as info:
        AgentSpec.from_yaml(text)
    assert "remove the !!tag" in info.value.issues[0].fix


def test_yaml_python_tags_are_not_executed() -> None:
    with pytest.raises(SpecError):
        AgentSpec.from_yaml("name: !!python/object/apply:os.getcwd []\nharness: codex\nmodel: gpt-5\n")


def test_long_single_line_text_is_yaml_not_a_path() -> None:
    """A one-line YAML document longer than a file name may be must not crash the path check."""
    text = (
        "{name: code-agent, harness: codex, model: gpt-5, env: {"
        + ", ".join(f"V{i}: x" for i in range(60))
        + "}}"
    )
    assert len(text) > 255
    assert AgentSpec.from_yaml(text).env["V59"] == "x"


def test_missing_file_is_treated_as_text() -> None:
    with pytest.raises(SpecError) as info:
        AgentSpec.from_yaml("does-not-exist.yaml")
    assert "expected a mapping" in str(info.value)


# ---- JSON Schema -------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def validator() -> jsonschema.Draft202012Validator:
    schema = AgentSpec.json_schema()
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


def test_json_schema_is_valid_and_describes_the_fields(validator: jsonschema.Draft202012Validator) -> None:
    schema = validator.schema
    assert set(schema["required"]) == {"name", "harness", "model"}
    assert set(schema["properties"]) == set(AgentSpec.model_fields)
    assert schema["additionalProperties"] is False


@pytest.mark.parametrize("name", GOOD_IDS)
def test_json_schema_accepts_good_specs(validator: jsonschema.Draft202012Validator, name: str) -> None:
    spec = GOOD[name]()
    validator.validate(spec.to_dict())
    validator.validate(yaml.safe_load(spec.to_yaml()))


@pytest.mark.parametrize(
    "data",
    [
        {"name": "a", "harness": "codex"},
        {"name": "a", "harness": "cursor", "model": "x"},
        {"name": "a", "harness": "codex", "model": "x", "modle": 1},
        {"name": "a", "harness": "codex", "model": "x", "resources": {"gpu": "1"}},
    ],
    ids=["missing-model", "bad-harness", "unknown-key", "unknown-nested"],
)
def test_json_schema_rejects_structurally_bad_specs(
    validator: jsonschema.Draft202012Validator, data: dict[str, Any]
) -> None:
    assert not validator.is_valid(data)


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("timeout", "30m"),
        ("network", "none"),
        ("network", ["pypi.org"]),
        ("system_prompt", "Be terse."),
        ("secrets", ["GH_TOKEN", {"name": "X", "required": False}]),
        ("resources", {"cpu": 2}),
    ],
)
def test_json_schema_accepts_the_documented_shorthands(
    validator: jsonschema.Draft202012Validator, field: str, value: Any
) -> None:
    """Editors validate hand-written files with this schema: every shorthand the loader accepts must pass."""
    data = {"name": "a", "harness": "codex", "model": "gpt-5", field: value}
    AgentSpec.from_dict(data)
    validator.validate(data)


# ---- frozen -------------------------------------------------------------------------------------


def test_spec_is_frozen() -> None:
    spec = GOOD["readme-repo-fixer"]()
    with pytest.raises(ValidationError):
        spec.name = "other"  # type: ignore[misc]
    with pytest.raises(ValidationError):
        spec.repos[0].url = "https://evil.example/x"  # type: ignore[misc]
    with pytest.raises(TypeError):
        spec.packages[0] = "evil"  # type: ignore[index]
    assert spec == GOOD["readme-repo-fixer"]()
    assert hash(spec.repos[0]) == hash(GOOD["readme-repo-fixer"]().repos[0])
