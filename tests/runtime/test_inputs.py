"""Bad or awkward inputs at the entry points get clear errors or just work: a relative ``workdir``
(resolved against the current directory, as the user meant), a workdir that is a file; and what a
turn leaves on disk is the owner's only."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from harness_run import AgentSpec, local
from harness_run.errors import UsageError
from harness_run.testing import ScriptedModel, shell, text

from ._helpers import MODEL, model_secrets

pytestmark = pytest.mark.harness


async def test_a_relative_workdir_is_resolved_and_a_file_is_refused(
    model: ScriptedModel, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    model.add(shell("echo hi > made.txt"), text("made"))
    spec = AgentSpec(name="rel", harness="claude-code", model=MODEL)
    with local.deploy(spec, workdir="rel") as engine:
        session = engine.start_session()
        result = await session.run("make a file", secrets=model_secrets(model))
        assert not result.is_error, result.error
    session_dir = tmp_path / "rel" / "sessions" / session.session_id
    assert (session_dir / "workspace" / "made.txt").is_file()
    # the session's files (the harness's own transcripts in its home) and the store: the owner's only
    modes = {p.name: stat.S_IMODE(p.stat().st_mode) for p in (session_dir, session_dir / "home")}
    assert modes == {session_dir.name: 0o700, "home": 0o700}
    assert stat.S_IMODE((tmp_path / "rel" / "history.sqlite3").stat().st_mode) == 0o600
    with local.get_engine("rel", workdir="rel") as again:
        assert again.get_session(session.session_id).record.turns == 1

    (tmp_path / "afile").write_text("x")
    with pytest.raises(UsageError, match="is a file, not a directory"):
        local.deploy(spec, workdir="afile")
