"""Reading the agent's files as the server (possibly root): a file the agent swapped for a link —
to a file outside the workspace, or through a linked directory — is not read into a checkpoint, and
the server does not write through a linked ``.git/config``."""

from __future__ import annotations

from pathlib import Path

from harness_run import AgentSpec
from harness_run.runtime.local._workspace import _read_inside, scrub_git_credentials  # pyright: ignore[reportPrivateUsage]


def test_only_regular_files_inside_the_workspace_are_read(tmp_path: Path) -> None:
    root, outside = tmp_path / "ws", tmp_path / "server-only"
    root.mkdir()
    outside.mkdir()
    (outside / "secret").write_text("SERVER-SECRET")
    (root / "mine.txt").write_text("agent work")
    (root / "link.txt").symlink_to(outside / "secret")
    (root / "dir").symlink_to(outside, target_is_directory=True)
    assert _read_inside(root / "mine.txt", root.resolve()) == b"agent work"
    assert _read_inside(root / "link.txt", root.resolve()) is None
    assert _read_inside(root / "dir" / "secret", root.resolve()) is None  # through a linked parent


def test_a_linked_git_config_is_not_written_through(tmp_path: Path) -> None:
    workspace, victim = tmp_path / "ws", tmp_path / "victim.conf"
    (workspace / ".git").mkdir(parents=True)
    victim.write_text("url = https://user:tok-123@example.com/repo.git\nkeep = tok-123\n")
    (workspace / ".git" / "config").symlink_to(victim)
    spec = AgentSpec(name="links", harness="claude-code", model="claude-sonnet-4-6")
    assert scrub_git_credentials(workspace, spec, ["tok-123"]) == []
    assert "tok-123" in victim.read_text(), "the file outside the workspace was left alone"
