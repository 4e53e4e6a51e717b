"""How to test your own agent offline in CI with the scripted model (run with pytest).

    pytest examples/offline_ci_test.py

The `scripted_model` fixture comes from harness-run's pytest plugin (installed with the package).
"""

from __future__ import annotations

from pathlib import Path

from harness_run import AgentSpec, local
from harness_run.testing import ScriptedModel, shell, text


async def test_agent_creates_the_report(scripted_model: ScriptedModel, tmp_path: Path) -> None:
    scripted_model.add(shell("echo '3 passed' > report.txt"), text("The report is in report.txt."))
    spec = AgentSpec(name="reporter", harness="claude-code", model="claude-sonnet-4-6")
    engine = local.deploy(spec, workdir=tmp_path)
    session = engine.start_session()

    result = await session.run(
        "Run the tests and write a report.",
        secrets={"ANTHROPIC_BASE_URL": scripted_model.url, "ANTHROPIC_API_KEY": "scripted-key"},
    )

    assert not result.is_error
    assert result.text == "The report is in report.txt."
    workspace = tmp_path / "sessions" / session.session_id / "workspace"
    assert (workspace / "report.txt").read_text() == "3 passed\n"
    assert "Run the tests" in scripted_model.main_requests[0].last_user_text
