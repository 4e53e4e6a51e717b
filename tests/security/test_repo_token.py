"""The repository token never sits in the agent's environment, argv, files or ``.git/config``: the
agent's git asks the engine for it through a credential helper, per request, during the turn only."""

from __future__ import annotations

import base64
import os
import subprocess
import sys
from pathlib import Path

import pytest
from runtime._git_http import GitHttpServer, log, make_bare_repo

from harness_run import RepoSource, SecurityPolicy
from harness_run.security import GitBroker
from harness_run.spec import GitRepo
from harness_run.testing import ScriptedModel, shell, text

from ._attacks import HARNESSES, MODELS, Canaries, model_secrets
from .conftest import EngineFactory

HELPER = Path(__file__).resolve().parents[2] / "harness_run" / "security" / "_git_helper.py"
PUSH = (
    "cd app && echo {n} > {n}.txt && git add -A && git -c user.name=a -c user.email=a@a commit -qm {n} "
    "&& git push -q origin HEAD:main && echo pushed-{n}"
)


def _ask_helper(env: dict[str, str], url: str) -> str:
    parts = url.split("/", 3)
    request = f"protocol={parts[0].rstrip(':')}\nhost={parts[2]}\npath={parts[3]}\n\n"
    done = subprocess.run(
        [sys.executable, "-I", "-S", str(HELPER), "get"],
        input=request,
        capture_output=True,
        text=True,
        env={"PATH": os.environ["PATH"], **env},
        check=False,
        timeout=30,
    )
    return done.stdout


@pytest.mark.harness
@pytest.mark.parametrize("harness", HARNESSES)
async def test_the_agent_pushes_without_ever_holding_the_repo_token(
    harness: str, make_engine: EngineFactory, model: ScriptedModel, tmp_path: Path
) -> None:
    token = Canaries().repo_token
    bare = make_bare_repo(tmp_path / "srv", "app", {"README.md": "app\n"})
    with GitHttpServer(tmp_path / "srv", token) as git_server:
        url = f"{git_server.url}/app.git"
        engine = make_engine(
            harness=harness,
            model=MODELS[harness],
            repos=[RepoSource.git(url, ref="main", auth="GH_TOKEN")],
            # the environment dump below is refused by the guards: the broker alone is tested here
            security_policy=SecurityPolicy(include_credential_guards=False),
        )
        session = engine.start_session()
        root = engine.workdir / "sessions" / session.session_id
        look = f"env | sort > {root}/env.txt; cat {root}/workspace/app/.git/config > {root}/gitconfig.txt"
        model.add(
            shell(PUSH.format(n="one")),
            shell(look),
            text("done"),
        )
        result = await session.run(
            "commit, push, look around",
            secrets={**model_secrets(harness, model, "sk-dummy-key"), "GH_TOKEN": token},
        )
        assert not result.is_error, result.error
        assert log(bare) == ["one", "init"]  # the agent's own push authenticated
        assert git_server.authorized > 0

    env = dict(line.split("=", 1) for line in (root / "env.txt").read_text().splitlines() if "=" in line)
    basic = base64.b64encode(f"x-access-token:{token}".encode()).decode()
    dumped = "\n".join(env.values()) + (root / "gitconfig.txt").read_text()
    assert token not in dumped and basic not in dumped
    assert env["GIT_CONFIG_KEY_0"] == f"credential.{url}.helper"
    assert env["HARNESS_RUN_GIT_TOKEN"].startswith("hrg-")
    # the turn is over: the helper, asked with everything the agent had, gets nothing
    assert _ask_helper(env, url) == ""
    bodies = "".join(str(r.body) for r in model.requests)
    assert token not in bodies and basic not in bodies


async def test_the_broker_answers_only_its_token_and_its_repositories(tmp_path: Path) -> None:
    broker = GitBroker()
    repo = GitRepo(url="https://git.example/acme/app.git", auth="GH_TOKEN")
    env = broker.substitute([repo], {"GH_TOKEN": "tok-abcdef-123456"}, {"PATH": "/bin"})
    assert "tok-abcdef-123456" not in "".join(env.values())
    await broker.start()
    import asyncio

    good = await asyncio.to_thread(_ask_helper, env, "https://git.example/acme/app.git")
    assert good == "username=x-access-token\npassword=tok-abcdef-123456\n"
    other = await asyncio.to_thread(_ask_helper, env, "https://git.example/acme/other.git")
    wrong = await asyncio.to_thread(_ask_helper, {**env, "HARNESS_RUN_GIT_TOKEN": "hrg-guess"}, repo.url)
    assert (other, wrong) == ("", "")
    assert (broker.answered, broker.refused) == (1, 2)
    await broker.aclose()
    assert not await asyncio.to_thread(Path(broker.socket_path).exists)
