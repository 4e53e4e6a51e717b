"""Every bad input is a clear error: the findings of the reliability review, each fed to the spec.

Each refusal names the field and says what to do; what must keep working is checked next to it.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from pydantic import BaseModel

from harness_run import AgentSpec, RepoSource, SkillSource, local
from harness_run.errors import SpecError, UsageError
from harness_run.spec import TurnConfig, check_prompt, is_reserved_env_name

from .cases import DICT_SCHEMA, FixResult, issue_at

BASE: dict[str, Any] = {"name": "code-agent", "harness": "codex", "model": "gpt-5.6-luna"}
CORE_YAML = "name: code-agent\nharness: codex\nmodel: gpt-5.6-luna\n"


def _refused(data: dict[str, Any], path: str, *, yaml: bool = False) -> str:
    """Refused at ``path`` with a fix; returns ``message (fix)`` for further checks."""
    text = _to_yaml(data)
    with pytest.raises(SpecError) as info:
        AgentSpec.from_yaml(text) if yaml else AgentSpec.from_dict(data)
    issue = issue_at(info.value, path)
    assert issue.fix, issue
    return f"{issue.message} ({issue.fix})"


def _to_yaml(data: dict[str, Any]) -> str:
    import yaml

    return yaml.safe_dump(data)


# ---- YAML bombs and bounds --------------------------------------------------------------------

# The reported 465-byte spec: nine levels of nine aliases = 9**9 strings inside output_schema.
ALIAS_BOMB = CORE_YAML + (
    "output_schema:\n"
    "  type: object\n"
    '  a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]\n'
    "  b: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a]\n"
    "  c: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b]\n"
    "  d: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c]\n"
    "  e: &e [*d,*d,*d,*d,*d,*d,*d,*d,*d]\n"
    "  f: &f [*e,*e,*e,*e,*e,*e,*e,*e,*e]\n"
    "  g: &g [*f,*f,*f,*f,*f,*f,*f,*f,*f]\n"
    "  h: &h [*g,*g,*g,*g,*g,*g,*g,*g,*g]\n"
    "  i: &i [*h,*h,*h,*h,*h,*h,*h,*h,*h]\n"
)


@pytest.mark.parametrize(
    "text",
    [
        ALIAS_BOMB,
        CORE_YAML + "env: &e {A: '1'}\n",  # an anchor alone
        CORE_YAML + "x: &s [*s]\n",  # a self-referencing alias
        "base: &b {harness: codex}\nname: a\nmodel: gpt-5\n<<: *b\n",  # a merge key
    ],
    ids=["bomb", "anchor", "recursive", "merge-key"],
)
def test_yaml_anchors_and_aliases_are_refused_at_once(text: str) -> None:
    started = time.perf_counter()
    with pytest.raises(SpecError) as info:
        AgentSpec.from_yaml(text)
    assert time.perf_counter() - started < 2
    (issue,) = info.value.issues
    assert "anchors and aliases" in issue.message
    assert issue.path.startswith("line ")
    assert "write the values out" in issue.fix


def test_shared_references_in_python_data_cannot_explode() -> None:
    """The same bomb built in Python (one list referenced 9 times per level) is bounded too."""
    bomb: Any = ["lol"] * 9
    for _ in range(8):
        bomb = [bomb] * 9
    started = time.perf_counter()
    message = _refused({**BASE, "output_schema": {"type": "object", "x": bomb}}, "output_schema")
    assert time.perf_counter() - started < 2
    assert "too large or nested too deeply" in message


def test_document_size_and_depth_are_bounded(tmp_path: Path) -> None:
    big = CORE_YAML + "system_prompt: '" + "x" * (1024 * 1024) + "'\n"
    with pytest.raises(SpecError, match="larger than 1024 KiB"):
        AgentSpec.from_yaml(big)
    path = tmp_path / "big.yaml"
    path.write_text(big)
    with pytest.raises(SpecError, match="larger than 1024 KiB") as info:
        AgentSpec.from_yaml(path)
    assert info.value.source == str(path)
    with pytest.raises(SpecError, match="nested too deeply"):
        AgentSpec.from_yaml(CORE_YAML + "env: " + "[" * 150 + "]" * 150 + "\n")
    # ordinary large content is fine
    AgentSpec.from_yaml(CORE_YAML + "system_prompt: '" + "x" * 200_000 + "'\n")


# ---- meaningless values -----------------------------------------------------------------------


@pytest.mark.parametrize(
    "model", [" ", "", "gpt-5\x00", "$(touch /tmp/x)", "gpt 5", "`id`", "a;b", "x" * 201]
)
def test_meaningless_model_ids_are_refused(model: str) -> None:
    assert "model id" in _refused({**BASE, "model": model}, "model")
    with pytest.raises(SpecError):
        TurnConfig(model=model)


@pytest.mark.parametrize(
    "model",
    ["claude-sonnet-4-6", "sonnet[1m]", "anthropic/claude-sonnet-4.6", "x/y:free", "claude-x@20250514"],
)
def test_real_model_ids_are_accepted(model: str) -> None:
    harness = "opencode" if "/" in model else "claude-code"
    assert AgentSpec(**{**BASE, "harness": harness, "model": model}).model == model


@pytest.mark.parametrize(
    ("data", "path"),
    [
        ({**BASE, "name": "agent\x00"}, "name"),
        ({**BASE, "name": "$(id)"}, "name"),
        ({**BASE, "skills": [{"path": "skills", "name": "a\x00b"}]}, "skills[0].name"),
        ({**BASE, "mcp_servers": [{"name": "$(id)", "command": "x"}]}, "mcp_servers[0].name"),
        ({**BASE, "secrets": ["A\x00"]}, "secrets[0].name"),
        ({**BASE, "secrets": [{"name": "A", "description": "x\x00"}]}, "secrets[0].description"),
        ({**BASE, "repos": [{"url": "https://github.com/a/b", "ref": "$(id)"}]}, "repos[0].ref"),
        ({**BASE, "repos": [{"url": "https://github.com/a/b", "ref": "--upload-pack=x"}]}, "repos[0].ref"),
        ({**BASE, "repos": [{"url": "https://github.com/a/b", "ref": "a..b"}]}, "repos[0].ref"),
        ({**BASE, "system_prompt": "be\x00nice"}, "system_prompt.text"),
        ({**BASE, "allowed_tools": ["Read\x00"]}, "allowed_tools[0]"),
        ({**BASE, "allowed_tools": [" "]}, "allowed_tools[0]"),
        ({**BASE, "setup_script": "make\x00"}, "setup_script"),
        ({**BASE, "env": {"A": "x\x00"}}, "env.A"),
        ({**BASE, "mcp_servers": [{"name": "db", "command": " "}]}, "mcp_servers[0].command"),
        (
            {**BASE, "mcp_servers": [{"name": "db", "command": "x", "args": ["\x00"]}]},
            "mcp_servers[0].args[0]",
        ),
        (
            {
                **BASE,
                "mcp_servers": [
                    {"kind": "remote", "name": "s", "url": "https://x", "headers": {"X": "a\r\nB: c"}}
                ],
            },
            "mcp_servers[0].headers.X",
        ),
        (
            {
                **BASE,
                "mcp_servers": [{"kind": "remote", "name": "s", "url": "https://x", "headers": {"X Y": "a"}}],
            },
            "mcp_servers[0].headers.X Y",
        ),
        ({**BASE, "model_base_url": "https://gw.example.com/ v1"}, "model_base_url"),
    ],
    ids=lambda v: "" if isinstance(v, dict) else v,
)
def test_nul_shell_syntax_and_blanks_are_refused(data: dict[str, Any], path: str) -> None:
    _refused(data, path)


def test_free_text_keeps_everything_but_nul() -> None:
    spec = AgentSpec(
        **BASE,
        system_prompt="Use $(pwd) and `ls`;\ttabs\nand newlines are fine.",
        setup_script="make deps && echo $(date)",
        allowed_tools=["Bash(git log:*)"],
        env={"A": "\x7f"},
    )
    assert "$(pwd)" in spec.system_prompt.text


# ---- output_schema must be a JSON Schema -------------------------------------------------------


@pytest.mark.parametrize(
    ("schema", "path"),
    [
        ({"type": "object", "properties": 5}, "output_schema.properties"),
        ({"type": "object", "properties": {"a": {"type": "strng"}}}, "output_schema.properties.a.type"),
        ({"type": "object", "properties": {"a": 1}}, "output_schema.properties.a"),
        ({"type": "object", "required": "a"}, "output_schema.required"),
        ({"type": "object", "required": ["a", "a"]}, "output_schema.required"),
        ({"type": "object", "minProperties": -1}, "output_schema.minProperties"),
        ({"type": "object", "anyOf": []}, "output_schema.anyOf"),
        ({"type": "object", "additionalProperties": "no"}, "output_schema.additionalProperties"),
        (
            {"type": "object", "properties": {"a": {"pattern": "(unclosed"}}},
            "output_schema.properties.a.pattern",
        ),
        ({"type": "object", "patternProperties": {"[": {}}}, "output_schema.patternProperties.["),
        ({"type": "object", "$defs": {"X": {"enum": "abc"}}}, "output_schema.$defs.X.enum"),
        ({"type": "object", "items": {"type": ["string", "string"]}}, "output_schema.items.type"),
        ({"type": "object", "x": "\x00"}, "output_schema"),
    ],
)
def test_output_schema_must_be_a_json_schema(schema: dict[str, Any], path: str) -> None:
    _refused({**BASE, "output_schema": schema}, path)
    with pytest.raises(SpecError):
        TurnConfig(output_schema=schema)


class _Nested(BaseModel):
    tags: list[str]
    scores: dict[str, float]
    child: FixResult | None = None


@pytest.mark.parametrize(
    "schema",
    [
        DICT_SCHEMA,
        FixResult.model_json_schema(),
        _Nested.model_json_schema(),
        {"type": "object", "x-vendor": {"anything": [1, None]}, "properties": {"a": True}},
        {"type": "object", "dependencies": {"a": ["b"], "c": {"required": ["d"]}}, "$id": "urn:x"},
    ],
)
def test_real_json_schemas_are_accepted(schema: dict[str, Any]) -> None:
    jsonschema.Draft202012Validator.check_schema(schema)
    assert AgentSpec(**BASE, output_schema=schema).output_json_schema == schema


# ---- paths and URLs stay where they belong -----------------------------------------------------


@pytest.mark.parametrize("path", ["/", "//", "/./", "~", "../../..", "skills/../../x", "", " ", "a\x00"])
def test_skill_paths_are_confined(path: str) -> None:
    _refused({**BASE, "skills": [{"path": path}]}, "skills[0].path")
    _refused({**BASE, "skills": [{"path": path}]}, "skills[0].path", yaml=True)


def test_spec_files_name_skills_relative_to_their_directory(tmp_path: Path) -> None:
    spec_file = tmp_path / "agent.yaml"
    spec_file.write_text(CORE_YAML + "skills:\n  - path: /home/me/skills\n")
    with pytest.raises(SpecError) as info:
        AgentSpec.from_yaml(spec_file)
    assert "relative to the spec file" in issue_at(info.value, "skills[0].path").fix
    spec_file.write_text(CORE_YAML + "skills:\n  - path: skills/summarize\n")
    assert AgentSpec.from_yaml(spec_file).skills[0] == SkillSource.local("skills/summarize")
    # from Python, an absolute directory is fine (tests, local development)
    assert AgentSpec(**BASE, skills=[SkillSource.local(str(tmp_path))]).skills[0].path == str(tmp_path)


@pytest.mark.parametrize(
    "url",
    [
        "ext::sh -c touch% /tmp/pwned",
        "ext::sh",
        "fd::17",
        "--upload-pack=touch /tmp/x",
        "ftp://example.com/r.git",
        "https://",
        "https://[::1",
        "github.com/acme/r",
        "file://otherhost/srv/r.git",
        "/srv/../etc",
        "https://github.com/a/b c",
        "https://example.com/..",
        "git@github.com:../x",
    ],
)
def test_repository_urls_must_be_git_network_urls(url: str) -> None:
    _refused({**BASE, "repos": [{"url": url}]}, "repos[0].url")
    _refused({**BASE, "skills": [{"url": url}]}, "skills[0].url")


@pytest.mark.parametrize("url", ["file:///srv/repos/app.git", "/srv/repos/app.git"])
def test_local_repositories_only_from_python(url: str) -> None:
    """The documented way for tests and local development: build the spec in Python."""
    assert AgentSpec(**BASE, repos=[RepoSource.git(url)]).repos[0].url == url
    message = _refused({**BASE, "repos": [{"url": url}]}, "repos[0].url", yaml=True)
    assert "local path" in message and "Python" in message


@pytest.mark.parametrize(
    "url",
    [
        "https://github.com/acme/r",
        "http://127.0.0.1:8080/app.git",
        "ssh://git@github.com/acme/r.git",
        "git://example.com/r.git",
        "git@github.com:acme/r.git",
    ],
)
def test_network_git_urls_are_accepted_everywhere(url: str) -> None:
    assert AgentSpec.from_yaml(CORE_YAML + f"repos:\n  - url: '{url}'\n").repos[0].url == url


def test_names_derived_from_sources_stay_one_path_component() -> None:
    """Skills are staged as skills/<name>/, repositories cloned into <workspace>/<dir_name>."""
    assert SkillSource.local(".").staged_name == "skills"
    assert SkillSource.local("team/skills/.").staged_name == "skills"
    assert SkillSource.git("https://github.com/a/b.git", subdir="pdf/.").staged_name == "pdf"
    assert RepoSource.git("git@github.com:acme/app.git").dir_name == "app"


# ---- environment hijacking ---------------------------------------------------------------------

RESERVED = [
    "PATH",
    "HOME",
    "LD_PRELOAD",
    "LD_LIBRARY_PATH",
    "DYLD_INSERT_LIBRARIES",
    "PYTHONPATH",
    "PYTHONSTARTUP",
    "GIT_CONFIG_COUNT",
    "GIT_CONFIG_KEY_0",
    "GIT_CONFIG_GLOBAL",
    "GIT_SSH_COMMAND",
    "HARNESS_RUN_STORE",
    "HARNESS_RUN_MCP_SEARCH_AUTHORIZATION",
    "BASH_ENV",
    "NODE_OPTIONS",
    "XDG_CONFIG_HOME",
    "CODEX_HOME",
    "path",
]


@pytest.mark.parametrize("name", RESERVED)
def test_environment_hijacking_names_are_refused(name: str) -> None:
    assert is_reserved_env_name(name)
    remote = {"kind": "remote", "name": "s", "url": "https://x"}
    stdio = {"name": "db", "command": "x"}
    _refused({**BASE, "secrets": [name]}, "secrets[0].name")
    _refused({**BASE, "repos": [{"url": "https://github.com/a/b", "auth": name}]}, "repos[0].auth")
    _refused(
        {**BASE, "mcp_servers": [{**remote, "header_secrets": {"A": name}}]}, "mcp_servers[0].header_secrets"
    )
    _refused({**BASE, "mcp_servers": [{**stdio, "env_secrets": {"X": name}}]}, "mcp_servers[0].env_secrets")
    _refused(
        {**BASE, "mcp_servers": [{**stdio, "env_secrets": {name: "X"}}]}, f"mcp_servers[0].env_secrets.{name}"
    )
    _refused({**BASE, "mcp_servers": [{**stdio, "env": {name: "x"}}]}, f"mcp_servers[0].env.{name}")
    message = _refused({**BASE, "env": {name: "x"}}, f"env.{name}")
    assert "choose another name" in message


def test_ordinary_names_and_settings_stay_allowed() -> None:
    spec = AgentSpec(
        **BASE,
        secrets=["OPENAI_API_KEY", "GH_TOKEN", "PATHFINDER_KEY", "MY_HOME_TOKEN"],
        env={
            "PYTHONUNBUFFERED": "1",
            "HARNESS_RUN_CODEX_MAX_RETRIES": "0",
            "TZ": "UTC",
            "LANG": "C.UTF-8",
            "GIT_AUTHOR_NAME": "bot",
        },
    )
    assert spec.env["PYTHONUNBUFFERED"] == "1"
    with pytest.raises(SpecError):  # a setting in env is still not a secret name
        AgentSpec(**BASE, secrets=["PYTHONUNBUFFERED"])


# ---- prompts -----------------------------------------------------------------------------------


def test_check_prompt() -> None:
    assert check_prompt("fix the bug") == "fix the bug"
    for bad in ("", "  ", None, 3, "a\x00b"):
        with pytest.raises(UsageError) as info:
            check_prompt(bad)
        assert "prompt" in str(info.value)


async def test_nul_in_a_prompt_is_refused_by_run_and_send(tmp_path: Path) -> None:
    session = local.deploy(AgentSpec(**BASE), workdir=tmp_path).start_session()
    with pytest.raises(UsageError, match="NUL") as info:
        session.run("fix\x00 the bug")
    assert "remove it" in str(info.value)
    with pytest.raises(UsageError, match="NUL"):
        session.send("\x00")
    assert session.current_run is None  # nothing was started
