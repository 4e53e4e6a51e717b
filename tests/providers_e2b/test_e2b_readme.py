"""HarnessBox's README examples as written, ``provider="e2b"`` included, on the E2B API double.

Only what points outside this machine changes (``runtime/_readme.py``'s ``adapt``: the import, the
model endpoint and key, the repo URL and its token); ``provider="e2b"`` stays. The SDK finds the
double through its own endpoint settings (``E2B_API_URL``/``E2B_SANDBOX_URL``), the history store
through ``HARNESS_RUN_STORE``, and ``os.getenv("E2B_API_KEY")`` is the canary key."""

from __future__ import annotations

from typing import Any

import pytest
from runtime._hbox import AUTHOR, RULES, Remote, git, namespace, remote
from runtime._readme import adapt, readme_blocks, run_block

from harness_run.testing import ScriptedModel

from .conftest import E2B_KEY

__all__ = ["remote"]  # the fixture

pytestmark = [pytest.mark.docker, pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(900)]


@pytest.mark.harness
@pytest.mark.parametrize("section", ["", "Quickstart", "Multi-Session Mode", "How It Works"])
async def test_readme_examples_run_verbatim_with_provider_e2b(
    section: str, e2b_env: str, e2b_double: Any, remote: Remote, capsys: pytest.CaptureFixture[str]
) -> None:
    source = adapt(readme_blocks()[section][0]).replace("provider=PROVIDER", 'provider="e2b"')
    assert 'provider="e2b"' in source
    if section != "How It Works":  # its secrets={...}: the E2B key from E2B_API_KEY, as the SDK reads it
        assert 'os.getenv("E2B_API_KEY")' in source
    with ScriptedModel(RULES) as model:
        await run_block(source, namespace(None, model, remote))  # pyright: ignore[reportArgumentType]
    printed = capsys.readouterr().out
    assert "all done" in printed or "hello there" in printed, printed
    if section in ("Quickstart", "How It Works"):  # one session on main, committed and pushed on kill
        assert remote.commit("main") == (AUTHOR, remote.main, "fixed.txt")
    if section == "Multi-Session Mode":  # two branches from main, each with its own work
        assert remote.commit("feat/auth") == (AUTHOR, remote.main, "auth.txt")
        assert remote.commit("feat/ui") == (AUTHOR, remote.main, "dark.txt")
        assert git(remote.bare, "rev-parse", "main") == remote.main
    assert e2b_double.sandboxes == {} and e2b_double.live_containers() == []  # kill deleted them
    assert e2b_double.api_keys == {E2B_KEY}
    assert remote.token not in printed and E2B_KEY not in printed
