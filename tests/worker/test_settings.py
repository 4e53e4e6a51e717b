"""The worker's pure parts: settings from the environment, the token check against the pod's
annotations file, and the spec as the worker runs it inside the image."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from harness_run import AgentSpec
from harness_run.compiler import stage_skills
from harness_run.errors import UsageError
from harness_run.worker._settings import WorkerSettings, parse_annotations, token_matches
from harness_run.worker._turns import image_spec

HASH = hashlib.sha256(b"tok-123").hexdigest()


def test_defaults_follow_the_contract() -> None:
    settings = WorkerSettings.from_env({"HARNESS_RUN_STORE": "gs://b/p", "HOME": "/home/agent"})
    assert (settings.host, settings.port) == ("0.0.0.0", 8787)
    assert settings.workdir == Path("/home/agent/.harness-run")
    assert settings.spec_path == Path("/opt/harness-run/spec.json")
    assert settings.podinfo_dir == Path("/etc/harness-run/podinfo")
    assert settings.token_sha256 is None
    root = WorkerSettings.from_env({"HARNESS_RUN_STORE": "/s", "HARNESS_RUN_ROOT": "/r", "HOME": "/h"})
    assert root.spec_path == Path("/r/spec.json")
    assert root.image_root == Path("/r")


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({}, "HARNESS_RUN_STORE is not set"),
        ({"HARNESS_RUN_STORE": "/s", "HARNESS_RUN_WORKER_PORT": "http"}, "not a TCP port"),
        ({"HARNESS_RUN_STORE": "/s", "HARNESS_RUN_WORKER_TOKEN_SHA256": "tok-123"}, "64 hex digits"),
    ],
)
def test_bad_settings_say_what_to_do(env: dict[str, str], message: str) -> None:
    with pytest.raises(UsageError, match=message):
        WorkerSettings.from_env(env)


def test_the_token_hash_comes_from_the_pod_annotations_file(tmp_path: Path) -> None:
    settings = WorkerSettings.from_env({"HARNESS_RUN_STORE": "/s", "HARNESS_RUN_PODINFO": str(tmp_path)})
    assert settings.expected_token_sha256() is None  # a warm pod before its claim: nothing accepted
    assert not token_matches("Bearer tok-123", None)
    (tmp_path / "annotations").write_text(
        f'harness-run.dev/token-sha256="{HASH}"\nother.io/x="a=b \\"quoted\\""\n'
    )
    assert settings.expected_token_sha256() == HASH
    assert token_matches("Bearer tok-123", HASH)
    assert token_matches("bearer  tok-123", HASH)
    for header in (None, "", "Bearer", "Bearer wrong", "Basic tok-123", "tok-123"):
        assert not token_matches(header, HASH)
    assert parse_annotations((tmp_path / "annotations").read_text())["other.io/x"] == 'a=b "quoted"'
    env_wins = WorkerSettings.from_env(
        {
            "HARNESS_RUN_STORE": "/s",
            "HARNESS_RUN_PODINFO": str(tmp_path),
            "HARNESS_RUN_WORKER_TOKEN_SHA256": "0" * 64,
        }
    )
    assert env_wins.expected_token_sha256() == "0" * 64


def test_inside_the_image_skills_come_from_the_staged_copies_and_packages_are_installed(
    tmp_path: Path,
) -> None:
    spec = AgentSpec.from_dict(
        {
            "name": "a",
            "harness": "claude-code",
            "model": "claude-sonnet-4-6",
            "skills": [
                {"path": "/build/machine/skills/triage"},
                {"url": "https://example.com/r.git", "name": "review"},
            ],
            "packages": ["six==1.17.0"],
        }
    )
    for name in ("triage", "review"):
        (tmp_path / "skills" / name).mkdir(parents=True)
        (tmp_path / "skills" / name / "SKILL.md").write_text(f"---\nname: {name}\n---\n")
    (tmp_path / "requirements").mkdir()
    (tmp_path / "requirements" / "agent.txt").write_text("six==1.17.0\n")

    local = image_spec(spec, None)
    assert local.checkpoint and local.skills == spec.skills and local.packages == spec.packages
    inside = image_spec(spec, tmp_path)
    assert inside.checkpoint
    assert inside.packages == ()
    assert [s.staged_name for s in inside.skills] == ["triage", "review"]
    files, pins = stage_skills(inside.skills, Path("/nonexistent"))
    assert sorted(files) == ["skills/review/SKILL.md", "skills/triage/SKILL.md"]
    assert pins == ()


def test_importing_the_package_stays_light() -> None:
    import subprocess
    import sys

    code = "import sys, harness_run.worker; print([m for m in ('aiohttp', 'google.cloud.storage') if m in sys.modules])"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
