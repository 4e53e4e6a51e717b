"""Property-based fuzzing of spec files and overlays.

Property: any input either validates — and then round-trips and is *meaningful* (no NUL, confined
paths, git network URLs, no reserved environment names, a real JSON Schema …, see
``_assert_meaningful``) — or raises our ``SpecError`` whose every issue has a non-empty field path
and a message; never another exception. In CI (``CI=true``) the examples are derandomized so a run
is reproducible.
"""

from __future__ import annotations

import copy
import math
import os
import re
from collections.abc import Callable, Iterator
from pathlib import PurePosixPath
from typing import Any

import jsonschema
import pytest
import yaml
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from harness_run import AgentSpec, SessionConfig, TurnConfig
from harness_run.errors import SpecError
from harness_run.spec import (
    GitRepo,
    GitSkill,
    LocalSkill,
    StdioMcpServer,
    effective_spec,
    is_reserved_env_name,
)

from .cases import GOOD

_CI = os.environ.get("CI", "").lower() == "true"
FUZZ = settings(
    max_examples=200,
    deadline=None,
    derandomize=_CI,
    database=None if _CI else settings.default.database,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.large_base_example],
)
QUICK = settings(FUZZ, max_examples=100)  # the hostile-value properties: a few seconds each

# ---- strategies -----------------------------------------------------------------------------------

_FIELD_NAMES = sorted(
    set(AgentSpec.model_fields)
    | set(SessionConfig.model_fields)
    | {
        "kind",
        "url",
        "ref",
        "auth",
        "path",
        "depth",
        "subdir",
        "command",
        "args",
        "headers",
        "header_secrets",
        "env_secrets",
        "transport",
        "egress",
        "allow_hosts",
        "cpu",
        "memory",
        "ephemeral_storage",
        "required",
        "description",
        "mode",
        "text",
        "append",
        "type",
        "properties",
    }
)
_WORDS = [
    "codex",
    "claude-code",
    "opencode",
    "gpt-5.6-luna",
    "claude-sonnet-4-6",
    "opus",
    "anthropic/claude-x",
    "none",
    "open",
    "allowlist",
    "30m",
    "1.5h",
    "-1",
    "0",
    "500m",
    "4Gi",
    "https://github.com/acme/r",
    "https://u:t@github.com/a/b",
    "http://[::1",
    "https://x.example?access_token=1",
    "GH_TOKEN",
    "gh-token",
    "${GH_TOKEN}",
    "Bearer ${X}",
    "Bearer abcdefghijk",
    "sk-" + "a" * 20,
    "ghp_" + "b" * 36,
    "../up",
    "/abs",
    "object",
    "array",
    "git",
    "local",
    "remote",
    "stdio",
    "http",
    "sse",
    "inherit",
    "replace",
    "httpx>=0.27",
    "--pre",
    "pkg @ https://example.com/p.whl",
    "*.github.com",
    "pypi.org",
    "Authorization",
    "high",
    "plan",
    "",
    " ",
    "a" * 70,
    "\x00",
    "é",
    "${",
    "}",
]
# Values the reliability review found accepted although meaningless or hostile.
HOSTILE = [
    " ",
    "\x00",
    "a\x00b",
    "$(touch /tmp/x)",
    "`id`",
    "ext::sh -c id",
    "ext::sh",
    "fd::3",
    "file:///etc",
    "/",
    "//",
    "~",
    "../../..",
    "skills/../..",
    "/abs/skills",
    "--upload-pack=x",
    "PATH",
    "HOME",
    "LD_PRELOAD",
    "PYTHONPATH",
    "GIT_CONFIG_COUNT",
    "GIT_CONFIG_KEY_0",
    "HARNESS_RUN_MCP_X",
    "HARNESS_RUN_STORE",
    "gpt 5",
    "strng",
    "a\r\nX-Injected: 1",
    "git@github.com:acme/r.git",
    "ssh://git@github.com/acme/r.git",
    "skills/ok",
    "main",
    "GOOD_NAME",
]
scalars = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.integers(min_value=-3, max_value=3)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=12)
    | st.sampled_from(_WORDS)
)
keys = st.sampled_from(_FIELD_NAMES) | st.text(max_size=8) | st.integers(-2, 2) | st.none() | st.booleans()
json_like = st.recursive(
    scalars,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(keys, children, max_size=5),
    max_leaves=15,
)
str_keyed = st.recursive(
    scalars,
    lambda children: (
        st.lists(children, max_size=4)
        | st.dictionaries(st.sampled_from(_FIELD_NAMES) | st.text(max_size=8), children, max_size=5)
    ),
    max_leaves=15,
)

_GOOD_DICTS: list[dict[str, Any]] = [
    d for make in GOOD.values() for d in (make().to_dict(), make().to_dict(exclude_defaults=True))
]
_GOOD_OVERLAYS: list[dict[str, Any]] = [
    {"model": "gpt-5", "max_turns": 3, "system_prompt": {"mode": "replace", "text": "x"}},
    {"max_turns": None, "reasoning_effort": "low", "allowed_tools": ["Read"], "timeout": "2m"},
    {"output_schema": {"type": "object", "properties": {"a": {"type": "string"}}}, "permission_mode": "plan"},
    {"max_budget_usd": 0.5, "disallowed_tools": ["Bash"], "model_base_url": "https://gw.example.com"},
]


def _paths(obj: Any, prefix: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    yield prefix
    if isinstance(obj, dict):
        for key, value in obj.items():
            yield from _paths(value, (*prefix, key))
    elif isinstance(obj, list):
        for index, value in enumerate(obj):
            yield from _paths(value, (*prefix, index))


def _nest(value: Any, depth: int, as_list: bool) -> Any:
    for _ in range(depth):
        value = [value] if as_list else {"x": value}
    return value


@st.composite
def mutated(draw: st.DrawFn, bases: list[dict[str, Any]], values: st.SearchStrategy[Any] = json_like) -> Any:
    """A valid document with 1-4 random edits: drop, replace, add a key, deep-nest, duplicate in a list."""
    doc: Any = copy.deepcopy(draw(st.sampled_from(bases)))
    for _ in range(draw(st.integers(1, 4))):
        path = draw(st.sampled_from(list(_paths(doc))))
        op = draw(st.sampled_from(["drop", "replace", "add", "nest", "dup"]))
        parent: Any = None
        target = doc
        for step in path:
            parent, target = target, target[step]
        if op == "add" and isinstance(target, dict):
            target[draw(keys)] = draw(values)
            continue
        if op == "dup" and isinstance(target, list) and target:
            target.append(copy.deepcopy(target[0]))
            continue
        if op == "drop" and parent is not None:
            del parent[path[-1]]
            continue
        new = _nest(target, draw(st.integers(1, 60)), draw(st.booleans())) if op == "nest" else draw(values)
        if parent is None:
            doc = new
        else:
            parent[path[-1]] = new
    return doc


_YAML_TOKENS = [
    "name:",
    "harness:",
    "model:",
    "env:",
    "mcp_servers:",
    "network:",
    "secrets:",
    "output_schema:",
    " ",
    "  ",
    "\n",
    "- ",
    "{",
    "}",
    "[",
    "]",
    ",",
    ":",
    "? ",
    "codex",
    "gpt-5",
    "&a ",
    "*a",
    "<<: *a",
    "!!binary ",
    "!!set ",
    "!!python/object:os.system ",
    "!!timestamp ",
    "2024-01-01",
    "'",
    '"',
    "#",
    "\t",
    "---\n",
    "...\n",
    "%YAML 1.1\n",
    "|\n",
    ">\n",
    ".inf",
    ".nan",
    "~",
    "null",
    "yes",
    "0x1F",
    "1e999",
    "\\",
    "%",
]
yaml_soup = st.lists(st.sampled_from(_YAML_TOKENS) | st.text(max_size=5), max_size=30).map("".join)


# ---- the property ----------------------------------------------------------------------------------


def _assert_spec_error(err: SpecError) -> None:
    assert err.issues, "SpecError without issues"
    for issue in err.issues:
        assert isinstance(issue.path, str), repr(issue)
        assert issue.path.strip(), repr(issue)
        assert issue.message, repr(issue)
    assert str(err)


def _valid_or_spec_error(load: Callable[[], Any]) -> Any:
    try:
        return load()
    except SpecError as err:
        _assert_spec_error(err)
        return None


def _check_round_trip(obj: Any) -> None:
    again = type(obj).from_dict(obj.to_dict())
    assert again == obj
    _assert_meaningful(obj, document=False)
    if isinstance(obj, AgentSpec):
        from_yaml = _valid_or_spec_error(lambda: AgentSpec.from_yaml(obj.to_yaml()))
        if from_yaml is not None:  # (a spec file may not name local sources; code may)
            assert from_yaml == obj
            _assert_meaningful(from_yaml, document=True)
        else:
            assert _local_sources(obj), "only local sources may make a valid spec an invalid file"
        assert all(not isinstance(v, float) or math.isfinite(v) for v in (obj.timeout, obj.max_budget_usd))


def _check_spec_data(data: Any) -> None:
    spec = _valid_or_spec_error(lambda: AgentSpec.from_dict(data))
    if spec is not None:
        _check_round_trip(spec)


# ---- what "meaningful" means -----------------------------------------------------------------------

_MODEL_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:/@+\[\]-]*$")
_GIT_NETWORK = re.compile(r"^(https?|ssh|git)://[^/\s]+|^[A-Za-z0-9._-]+@[A-Za-z0-9.-]+:")


def _strings(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from _strings(key)
            yield from _strings(item)
    elif isinstance(value, list | tuple):
        for item in value:
            yield from _strings(item)


def _local_sources(spec: AgentSpec) -> list[str]:
    urls = [s.url for s in spec.skills if isinstance(s, GitSkill)] + [r.url for r in spec.repos]
    paths = [s.path for s in spec.skills if isinstance(s, LocalSkill)]
    return [u for u in urls if u.startswith(("file:", "/"))] + [p for p in paths if p.startswith(("/", "~"))]


def _assert_meaningful(obj: Any, *, document: bool) -> None:
    """What every accepted spec (or overlay) must be, however it was fuzzed."""
    data = obj.to_dict()
    assert not any("\x00" in text for text in _strings(data)), data
    if data.get("model") is not None:
        assert _MODEL_ID.match(data["model"]), data["model"]
    if data.get("output_schema") is not None:
        jsonschema.Draft202012Validator.check_schema(data["output_schema"])
    for tool in (*(data.get("allowed_tools") or ()), *(data.get("disallowed_tools") or ())):
        assert tool.strip() and tool.isprintable(), tool
    if not isinstance(obj, AgentSpec):
        return
    for skill in obj.skills:
        if isinstance(skill, LocalSkill):
            parts = PurePosixPath(skill.path).parts
            assert ".." not in parts and [p for p in parts if p.strip("/") not in {"", ".", "~"}], skill
            assert not document or not skill.path.startswith(("/", "~")), skill
    for source in (*[s for s in obj.skills if isinstance(s, GitSkill)], *obj.repos):
        assert not source.url.startswith("-") and "::" not in source.url.split("/")[0], source
        assert _GIT_NETWORK.match(source.url) or (not document and source.url.startswith(("file:", "/")))
        if isinstance(source, GitRepo) and source.ref is not None:
            assert not source.ref.startswith("-") and ".." not in source.ref
    for name in [s.staged_name for s in obj.skills]:  # skills/<name>/ in the build context
        assert name.strip(".") and "/" not in name and "\x00" not in name, name
    for repo in obj.repos:  # cloned into <workspace>/<dir_name>
        assert (
            not PurePosixPath(repo.dir_name).is_absolute() and ".." not in PurePosixPath(repo.dir_name).parts
        )
    names = [s.name for s in obj.secrets] + [r.auth for r in obj.repos if r.auth]
    assert not any(is_reserved_env_name(n) for n in names), names
    env_keys = [*obj.env, *(k for m in obj.mcp_servers if isinstance(m, StdioMcpServer) for k in m.env)]
    assert not any(is_reserved_env_name(k, as_setting=True) for k in env_keys), env_keys


# ---- AgentSpec ---------------------------------------------------------------------------------------


@FUZZ
@given(json_like)
def test_arbitrary_data_as_spec(data: Any) -> None:
    _check_spec_data(data)


@FUZZ
@given(
    st.dictionaries(keys, json_like, max_size=5).map(
        lambda d: {"name": "fuzz", "harness": "codex", "model": "gpt-5", **d}
    )
)
def test_valid_core_with_arbitrary_fields(data: dict[str, Any]) -> None:
    _check_spec_data(data)


@FUZZ
@given(mutated(_GOOD_DICTS))
@example({"name": "a", "harness": "codex", "model": "gpt-5", "timeout": float("inf")})
@example({"name": "a", "harness": "codex", "model": "gpt-5", "max_budget_usd": float("inf")})
@example(
    {"name": "a", "harness": "codex", "model": "gpt-5", "output_schema": {"type": "object", "x": math.nan}}
)
@example({"name": "a", "harness": "codex", "model": "gpt-5", "env": {1: "x", None: "y"}})
@example(
    {
        "name": "a",
        "harness": "codex",
        "model": "gpt-5",
        "mcp_servers": [{"kind": 1}],
        "skills": [{"kind": []}],
    }
)
def test_mutated_valid_spec(data: Any) -> None:
    _check_spec_data(data)


@FUZZ
@given(mutated(_GOOD_DICTS, str_keyed))
def test_mutated_spec_as_yaml_text(data: Any) -> None:
    text = yaml.safe_dump(data)
    spec = _valid_or_spec_error(lambda: AgentSpec.from_yaml(text))
    if spec is not None:
        _check_round_trip(spec)


@FUZZ
@given(st.text(max_size=300) | yaml_soup)
@example("a" * 300)  # one-line text too long to be a file name: used to raise OSError
@example("!!timestamp")  # PyYAML constructor errors (AttributeError, ValueError, KeyError) leaked
@example("a: !!int abc")
@example("a: !!bool maybe")
@example("a: !!timestamp 2024-13-45")
@example("name: a\nname: b\n")
@example("? [a]\n: 1\n")
@example("{name: a, harness: codex, model: gpt-5, timeout: .inf}")
@example("&a [*a]")
@example("- &a x\n- *a\n")
def test_random_text_as_yaml(text: str) -> None:
    spec = _valid_or_spec_error(lambda: AgentSpec.from_yaml(text))
    if spec is not None:
        _check_round_trip(spec)


def test_very_deep_nesting_is_a_spec_error() -> None:
    deep: Any = "x"
    for _ in range(1200):  # deeper than Python's recursion limit
        deep = [deep]
    core = {"name": "a", "harness": "codex", "model": "gpt-5"}
    for data in ({**core, "output_schema": {"type": "object", "x": deep}}, {**core, "env": deep}, deep):
        with pytest.raises(SpecError) as info:
            AgentSpec.from_dict(data)
        _assert_spec_error(info.value)
    with pytest.raises(SpecError) as info:
        AgentSpec.from_yaml("x: " + "[" * 600 + "]" * 600)
    assert "nested too deeply" in str(info.value)


# ---- overlays ----------------------------------------------------------------------------------------

_BASE_SPEC = AgentSpec(
    name="fuzz", harness="codex", model="gpt-5", extra_harnesses=["claude-code"], max_turns=4
)


def _check_overlay_data(cls: Any, data: Any) -> None:
    overlay = _valid_or_spec_error(lambda: cls.from_dict(data))
    if overlay is None:
        return
    _check_round_trip(overlay)
    assert cls.from_dict(overlay.to_dict()).model_fields_set == overlay.model_fields_set
    spec = _valid_or_spec_error(lambda: effective_spec(_BASE_SPEC, overlay))
    if spec is not None:
        _check_round_trip(spec)


@FUZZ
@given(st.sampled_from([SessionConfig, TurnConfig]), json_like)
def test_arbitrary_data_as_overlay(cls: Any, data: Any) -> None:
    _check_overlay_data(cls, data)


@FUZZ
@given(st.sampled_from([SessionConfig, TurnConfig]), mutated(_GOOD_OVERLAYS))
@example(SessionConfig, {"harness": None, "model": None, "timeout": None})
@example(TurnConfig, {"max_budget_usd": float("inf")})
def test_mutated_overlay(cls: Any, data: Any) -> None:
    _check_overlay_data(cls, data)


# ---- hostile values ------------------------------------------------------------------------------

hostile = st.sampled_from(HOSTILE) | st.text(alphabet=st.sampled_from("aZ0_/.-:$()\x00 ~@"), max_size=10)
_HOSTILE_BASES: list[dict[str, Any]] = [
    GOOD["kitchen-sink"]().to_dict(exclude_defaults=True),
    GOOD["readme-repo-fixer"]().to_dict(exclude_defaults=True),
    GOOD["stdio-mcp-env-secrets"]().to_dict(exclude_defaults=True),
]


@QUICK
@given(mutated(_HOSTILE_BASES, hostile))
@example({"name": "a", "harness": "codex", "model": "gpt-5", "skills": [{"path": "/"}]})
@example({"name": "a", "harness": "codex", "model": "gpt-5", "repos": [{"url": "ext::sh -c id"}]})
@example({"name": "a", "harness": "codex", "model": "gpt-5", "secrets": ["LD_PRELOAD"]})
def test_hostile_values_are_refused_or_harmless(data: Any) -> None:
    _check_spec_data(data)


@QUICK
@given(mutated(_HOSTILE_BASES, hostile))
def test_hostile_values_in_spec_files(data: Any) -> None:
    spec = _valid_or_spec_error(lambda: AgentSpec.from_yaml(yaml.safe_dump(data)))
    if spec is not None:
        _assert_meaningful(spec, document=True)


_SCHEMA_KEYS = [
    "type",
    "properties",
    "items",
    "required",
    "enum",
    "const",
    "anyOf",
    "allOf",
    "not",
    "$defs",
    "$ref",
    "additionalProperties",
    "minItems",
    "pattern",
    "patternProperties",
    "format",
    "x-extra",
]
_SCHEMA_VALUES = st.sampled_from(
    ["object", "string", "strng", "(", "^a$", "#/$defs/X", 0, -1, 1.5, True, None, [], ["a", "a"], ["a"], {}]
)
schema_like = st.recursive(
    _SCHEMA_VALUES,
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(st.sampled_from(_SCHEMA_KEYS), children, max_size=4)
    ),
    max_leaves=12,
)


@QUICK
@given(st.dictionaries(st.sampled_from(_SCHEMA_KEYS), schema_like, max_size=5))
@example({"properties": {"a": {"type": "strng"}}})
@example({"required": ["a", "a"]})
def test_accepted_output_schemas_are_json_schemas(extra: dict[str, Any]) -> None:
    schema = {**extra, "type": "object"}
    for load in (
        lambda: AgentSpec.from_dict(
            {"name": "a", "harness": "codex", "model": "gpt-5", "output_schema": schema}
        ),
        lambda: TurnConfig.from_dict({"output_schema": schema}),
    ):
        accepted = _valid_or_spec_error(load)
        if accepted is not None:
            jsonschema.Draft202012Validator.check_schema(accepted.to_dict()["output_schema"])
