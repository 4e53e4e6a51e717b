"""Spec files round-trip: what ``to_yaml`` writes, ``from_yaml`` and ``harness-run validate`` read back
as the same spec — every field set at once, local skill directories written relative to the file, and
what a spec file may not hold (an absolute path, a local repository) refused by ``to_yaml`` itself,
naming the field and the fix, instead of written and refused on reading."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from harness_run import AgentSpec
from harness_run.cli import main
from harness_run.errors import SpecError, UsageError
from harness_run.spec import (
    ApprovalPolicy,
    GitOptions,
    McpServer,
    Network,
    RepoSource,
    Resources,
    Secret,
    SecurityPolicy,
    SkillSource,
    SystemPrompt,
)

VERDICT = {
    "type": "object",
    "properties": {"ok": {"type": "boolean"}, "notes": {"type": "array", "items": {"type": "string"}}},
    "required": ["ok"],
}


def every_field(skills: list[str]) -> AgentSpec:
    """A spec with every field away from its default."""
    spec = AgentSpec(
        name="every-field",
        harness="claude-code",
        model="claude-sonnet-4-6",
        extra_harnesses=["codex", "opencode"],
        system_prompt=SystemPrompt.inherit(append="Be brief.\nCite files."),
        skills=[
            *(SkillSource.local(path) for path in skills),
            SkillSource.git(
                "https://github.com/acme/skills.git", ref="v1.2.0", subdir="review", name="code-review"
            ),
        ],
        repos=[
            RepoSource.git(
                "https://github.com/acme/app.git", ref="main", auth="GH_TOKEN", path="app", depth=1
            ),
            RepoSource.git("git@github.com:acme/lib.git", path="lib"),
        ],
        mcp_servers=[
            McpServer.github(),
            McpServer.remote("search", "https://mcp.example.com/sse", {"X-Team": "core"}, transport="sse"),
            McpServer.stdio(
                "db", "db-mcp", ["--read-only"], env={"DB_HOST": "db"}, env_secrets={"DB_PASSWORD": "DB_PW"}
            ),
        ],
        packages=["requests==2.32.3", "rich>=13"],
        system_packages=["ripgrep", "jq"],
        secrets=[
            Secret("ANTHROPIC_API_KEY"),
            Secret("GH_TOKEN", expose=True, description="pushes the branch"),
            Secret("OPTIONAL_KEY", required=False),
        ],
        env={"LOG_FORMAT": "json"},
        allowed_tools=["Read", "Edit", "Bash"],
        disallowed_tools=["WebFetch"],
        permission_mode="acceptEdits",
        max_turns=12,
        max_budget_usd=2.5,
        reasoning_effort="high",
        output_schema=VERDICT,
        checkpoint=True,
        timeout=600.0,
        resources=Resources(cpu="2", memory="4Gi", ephemeral_storage="20Gi"),
        network=Network(egress="allowlist", allow_hosts=["pypi.org", "*.github.com"]),
        setup_script="pip install -e app\n",
        model_base_url="https://gateway.example.com/v1",
        git=GitOptions(
            commit="after_turn",
            push=True,
            author="Ada Bot <ada@example.com>",
            message="{engine}: turn {turn}",
        ),
        security_policy=SecurityPolicy(
            denied_tools=["Task"], denied_bash_patterns=["git push --force*"], deny_network=False
        ),
        approvals=ApprovalPolicy(
            commands=["git push*"], tools=["mcp__github__create_pr"], file_writes=True, timeout_s=120
        ),
    )
    defaults = AgentSpec(name="x", harness="claude-code", model="claude-sonnet-4-6")
    optional = [name for name, info in AgentSpec.model_fields.items() if not info.is_required()]
    same = [name for name in optional if getattr(spec, name) == getattr(defaults, name)]
    assert same == [], f"not set away from the default: {same}"
    return spec


def _skill(base: Path, name: str) -> Path:
    path = base / name
    path.mkdir(parents=True)
    path.joinpath("SKILL.md").write_text(f"---\nname: {name}\ndescription: {name}\n---\n")
    return path


def _validate(path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    capsys.readouterr()
    code = main(["validate", str(path)])
    out, err = capsys.readouterr()
    assert (code, err) == (0, ""), err
    assert out.startswith("ok: every-field (claude-code, claude-sonnet-4-6)")


def test_every_field_round_trips_through_text_and_a_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    spec = every_field(["skills/fix-tests"])  # relative: to the compile base_dir, i.e. the file's directory
    assert AgentSpec.from_yaml(spec.to_yaml()) == spec
    path = tmp_path / "agent.yaml"
    spec.to_yaml(path)
    assert AgentSpec.from_yaml(path) == spec
    _skill(tmp_path / "skills", "fix-tests")
    _validate(path, capsys)


def test_to_yaml_writes_local_skills_relative_to_the_file_it_writes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    project = tmp_path / "project"
    inside = _skill(project / "agents" / "skills", "lint")
    deeper = _skill(project / "agents" / "team" / "skills", "review")
    spec = every_field([str(inside), str(deeper)])
    path = project / "agents" / "agent.yaml"
    text = spec.to_yaml(path)

    assert path.read_text(encoding="utf-8") == text
    written = [s.get("path") for s in yaml.safe_load(text)["skills"]]
    assert written == ["skills/lint", "team/skills/review", None]  # the git skill has a url
    loaded = AgentSpec.from_yaml(path)
    assert [(path.parent / s.path).resolve() for s in loaded.skills[:2]] == [inside, deeper]  # type: ignore[union-attr]
    assert loaded == spec.model_copy(update={"skills": loaded.skills})  # only the paths are re-rooted
    assert loaded.skills[2] == spec.skills[2]
    _validate(path, capsys)


def test_to_yaml_refuses_what_a_spec_file_cannot_hold(tmp_path: Path) -> None:
    outside = _skill(tmp_path / "shared", "lint")
    spec = every_field([str(outside)])
    with pytest.raises(UsageError) as no_path:  # text without a file: absolute paths have no anchor
        spec.to_yaml()
    assert "skills[0].path" in str(no_path.value) and "to_yaml(" in str(no_path.value)

    target = tmp_path / "agents" / "agent.yaml"
    with pytest.raises(UsageError) as outside_dir:  # a spec file only names paths inside its directory
        spec.to_yaml(target)
    assert "skills[0].path" in str(outside_dir.value) and str(tmp_path / "agents") in str(outside_dir.value)
    assert not target.exists()  # nothing half-written

    local_repo = spec.model_copy(update={"skills": (), "repos": (RepoSource.git(f"file://{tmp_path}/repo"),)})
    with pytest.raises(UsageError) as local:
        local_repo.to_yaml(target)
    assert "repos[0].url" in str(local.value) and "network URL" in str(local.value)
    assert not target.exists()
    assert isinstance(local.value, SpecError) and local.value.paths == ["repos[0].url"]
