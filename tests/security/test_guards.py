"""Credential guards and ``SecurityPolicy`` on the real CLIs: the scripted model asks the agent for
each attack as a tool call; the guard refuses it, the canaries never reach the model, ordinary
commands still run; the guard fails closed (a crashing, hanging or missing guard denies)."""

from __future__ import annotations

import asyncio
import json
import shlex
import subprocess
import sys
import time
from pathlib import Path

import pytest
from runtime._git_http import GitHttpServer, make_bare_repo

from harness_run import AgentSpec, McpServer, RepoSource, Secret, SecurityPolicy, SessionConfig, SpecError
from harness_run.harness import _guard
from harness_run.harness._guard import verdict
from harness_run.harness._policy import guard_command, guard_rules
from harness_run.security import GuardBroker
from harness_run.testing import ScriptedModel, shell, text, tool_call

from ._attacks import DENIED_MARKERS, HARNESSES, KNOWN_GAPS, MODELS, SHELL_ATTACKS, TOOL_ATTACKS, Canaries
from .conftest import EngineFactory

DEFAULT_RULES = guard_rules(SecurityPolicy())
MCP_SERVER = Path(__file__).resolve().parents[1] / "runtime" / "mcp_marker_server.py"
BENIGN = [
    "ls -la && git status; echo done",
    "python -m pytest tests/test_env.py -q",
    "source .venv/bin/activate && pip list",
    "env FOO=1 make build",
    "ps -ef | grep node",
    "set -euo pipefail; echo ok",
    "cat README.md | head",
    "export PATH=$PATH:/opt/bin; npm test",
    'grep -rn "os.environ" src/ | head',  # a code search is not a read of the environment
    "rg process.env --type ts",
]


# --- the guard's decisions (pure) -------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(SHELL_ATTACKS))
def test_every_attack_command_is_refused_by_the_default_guards(name: str) -> None:
    command = SHELL_ATTACKS[name]
    assert verdict(DEFAULT_RULES, "Bash", {"command": command}) is not None
    # the forms other CLIs use: Codex's argv, a nested shell
    assert verdict(DEFAULT_RULES, "exec_command", {"cmd": ["bash", "-lc", command]}) is not None
    assert verdict(DEFAULT_RULES, "bash", {"command": f"bash -c {json.dumps(command)}"}) is not None
    assert verdict(DEFAULT_RULES, "bash", {"command": f"sh -lc {shlex.quote(command)}"}) is not None


@pytest.mark.parametrize("command", BENIGN)
def test_ordinary_commands_pass(command: str) -> None:
    assert verdict(DEFAULT_RULES, "Bash", {"command": command}) is None


def test_policy_rules_tools_patterns_network_and_the_guards_switch() -> None:
    rules = guard_rules(
        SecurityPolicy(
            denied_tools=["WebFetch", "mcp__db__drop"],
            denied_bash_patterns=["git push*", "rm -rf /*"],
            deny_network=True,
            include_credential_guards=False,
        )
    )
    assert verdict(rules, "WebFetch", {"url": "https://x"}) is not None
    assert verdict(rules, "db_drop", {}) is not None  # OpenCode's name for mcp__db__drop
    assert verdict(rules, "Bash", {"command": "cd app && git push origin main"}) is not None
    assert verdict(rules, "Bash", {"command": "git pull"}) is None
    assert verdict(rules, "Bash", {"command": "curl https://example.com"}) is not None
    assert verdict(rules, "Bash", {"command": "env"}) is None  # guards off
    assert verdict(rules, "Read", {"file_path": "/w/.env"}) is None
    assert verdict(DEFAULT_RULES, "Read", {"file_path": "/w/.env"}) is not None
    assert verdict(DEFAULT_RULES, "Write", {"file_path": "/w/.claude/settings.local.json"}) is not None


def _run_hook(command: str, call: object, timeout: float = 30) -> tuple[int, str, float]:
    start = time.monotonic()
    done = subprocess.run(
        ["/bin/sh", "-c", command],
        input=call if isinstance(call, str) else json.dumps(call),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    return done.returncode, done.stderr, time.monotonic() - start


def test_the_hook_command_allows_denies_and_fails_closed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    policy = SecurityPolicy()
    command = guard_command(policy)
    assert command is not None
    attack = {"tool_name": "Bash", "tool_input": {"command": "env"}}
    benign = {"tool_name": "Bash", "tool_input": {"command": "echo hi"}}
    assert _run_hook(command, benign)[0] == 0
    code, err, _ = _run_hook(command, attack)
    assert code == 2 and "prints the environment" in err
    assert _run_hook(command, "not json")[0] == 2  # unreadable input: denied

    crashing = tmp_path / "crash.py"
    crashing.write_text("raise RuntimeError('guard bug')\n")
    monkeypatch.setattr(_guard, "GUARD_SCRIPT", crashing)
    assert _run_hook(guard_command(policy) or "", benign)[0] == 2

    hanging = tmp_path / "hang.py"
    hanging.write_text("import time\ntime.sleep(60)\n")
    monkeypatch.setattr(_guard, "GUARD_SCRIPT", hanging)
    monkeypatch.setattr("harness_run.harness._policy.GUARD_TIMEOUT_S", 1.0)
    code, _, took = _run_hook(guard_command(policy) or "", benign)
    assert code == 2 and took < 10

    monkeypatch.setattr(_guard, "GUARD_SCRIPT", Path(_guard.__file__))
    assert _run_hook(guard_command(policy, python=str(tmp_path / "no-python")) or "", benign)[0] == 2
    assert guard_command(SecurityPolicy(include_credential_guards=False)) is None  # nothing to enforce


async def _ask(command: str, call: object) -> tuple[int, str, float]:
    """Run the hook command without blocking the loop the guard server answers on."""
    start = time.monotonic()
    proc = await asyncio.create_subprocess_exec(
        "/bin/sh",
        "-c",
        command,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    data = call if isinstance(call, str) else json.dumps(call)
    _, err = await asyncio.wait_for(proc.communicate(data.encode()), 30)
    return proc.returncode or 0, err.decode(), time.monotonic() - start


async def test_the_served_guard_allows_denies_and_fails_closed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The engine's guard server (what every engine turn uses): the same verdicts as the script,
    and a deny for a wrong token, unreadable input, a verdict that raises, a server that hangs or
    is gone, and a client that crashes."""
    from harness_run.harness import GUARD_SOCKET_ENV, GUARD_TOKEN_ENV
    from harness_run.security import GuardBroker, _guard_broker

    policy = SecurityPolicy(denied_bash_patterns=["git push*"])
    broker = GuardBroker()
    env = broker.substitute(policy, {"PATH": "/usr/bin"})
    assert GuardBroker().substitute(SecurityPolicy(include_credential_guards=False), {}) == {}
    await broker.start()
    command = guard_command(policy, env=env)
    assert command is not None and "_guard_client.py" in command and env[GUARD_TOKEN_ENV] in command
    benign = {"tool_name": "Bash", "tool_input": {"command": "echo hi"}}
    try:
        assert (await _ask(command, benign))[0] == 0
        code, err, _ = await _ask(command, {"tool_name": "Bash", "tool_input": {"command": "env"}})
        assert code == 2 and "prints the environment" in err
        code, err, _ = await _ask(command, {"tool_name": "Bash", "tool_input": {"command": "git push -f"}})
        assert code == 2 and "git push*" in err
        assert (await _ask(command, "not json"))[0] == 2
        shell = guard_command(policy, shell=True, env=env) or ""
        assert (await _ask(shell, "for f in /proc/*/environ; do cat $f; done"))[0] == 2
        assert (await _ask(shell, "ls -la"))[0] == 0
        wrong = command.replace(env[GUARD_TOKEN_ENV], "hrk-forged")
        assert (await _ask(wrong, benign))[0] == 2
        assert broker.allowed == 2 and broker.denied == 5

        def broken(*_args: object, **_kwargs: object) -> str | None:
            raise RuntimeError("guard bug")

        monkeypatch.setattr(_guard_broker, "guard_verdict", broken)
        code, err, _ = await _ask(command, benign)
        assert code == 2 and "the guard failed" in err
        monkeypatch.undo()

        crashing = tmp_path / "crash.py"
        crashing.write_text("raise RuntimeError('client bug')\n")
        monkeypatch.setattr(_guard, "GUARD_CLIENT", crashing)
        assert (await _ask(guard_command(policy, env=env) or "", benign))[0] == 2
        monkeypatch.undo()
    finally:
        await broker.aclose()
    code, err, _ = await _ask(command, benign)  # the turn is over: nobody answers
    assert code == 2 and "the guard failed" in err

    # a server that takes the call and never answers: the wrapper's timeout denies
    hung: list[asyncio.StreamWriter] = []

    async def hang(_reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        hung.append(writer)

    path = str(tmp_path / "hang.sock")
    server = await asyncio.start_unix_server(hang, path=path)
    monkeypatch.setattr("harness_run.harness._policy.GUARD_TIMEOUT_S", 1.0)
    hanging = guard_command(policy, env={GUARD_SOCKET_ENV: path, GUARD_TOKEN_ENV: "hrk-x"}) or ""
    code, _, took = await _ask(hanging, benign)
    assert code == 2 and took < 10
    server.close()
    for writer in hung:
        writer.close()


# --- refusals -------------------------------------------------------------------------------


def test_settings_a_harness_cannot_enforce_are_refused_naming_the_field(
    make_engine: EngineFactory, model: ScriptedModel
) -> None:
    for harness in ("claude-code", "opencode"):
        engine = make_engine(
            name=f"refuse-{harness}",
            harness=harness,
            model=MODELS[harness],
            security_policy=SecurityPolicy(deny_network=True),
        )
        with pytest.raises(SpecError) as caught:
            engine.start_session().run("go", secrets={"OPENAI_API_KEY": "k", "ANTHROPIC_API_KEY": "k"})
        assert caught.value.issues[0].path == "security_policy.deny_network"
        assert "codex" in caught.value.issues[0].fix
    assert model.requests == []  # nothing started
    with pytest.raises(SpecError, match="security_policy"):
        AgentSpec.from_dict({"name": "a", "harness": "codex", "model": "gpt-5", "security_policy": {"x": 1}})
    with pytest.raises(SpecError, match="denied_bash_patterns"):
        SecurityPolicy(denied_bash_patterns=["line\nbreak"])


def test_the_policy_is_left_out_of_specs_that_keep_the_default() -> None:
    spec = AgentSpec(name="a", harness="codex", model="gpt-5")
    assert "security_policy" not in spec.to_dict()  # digests of existing specs do not move
    strict = spec.model_copy(update={"security_policy": SecurityPolicy(denied_tools=["WebFetch"])})
    assert AgentSpec.from_dict(strict.to_dict()) == strict


# --- the real CLIs ----------------------------------------------------------------------------


def _secrets(
    harness: str, model: ScriptedModel, canaries: Canaries, *, hidden: bool = True
) -> dict[str, str]:
    names = {
        "HIDDEN_SECRET": canaries.hidden_secret,
        "MCP_SECRET": canaries.mcp_secret,
        "GH_TOKEN": canaries.repo_token,
    }
    hidden_secret = names if hidden else {}
    if harness == "claude-code":
        return {"ANTHROPIC_BASE_URL": model.url, "ANTHROPIC_API_KEY": canaries.model_key, **hidden_secret}
    return {"OPENAI_BASE_URL": model.openai_url, "OPENAI_API_KEY": canaries.model_key, **hidden_secret}


def _plant_credential_files(engine_workdir: Path, session_id: str, value: str) -> None:
    root = engine_workdir / "sessions" / session_id
    for rel in ("workspace/.env", "home/.aws/credentials", "home/.config/gcloud/credentials.db"):
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"SECRET={value}\n")


def _model_saw(model: ScriptedModel) -> str:
    return "\n".join(json.dumps(r.body) for r in model.requests)


@pytest.mark.harness
@pytest.mark.parametrize("harness", HARNESSES)
async def test_the_real_cli_refuses_every_attack_and_no_canary_reaches_the_model(
    harness: str,
    make_engine: EngineFactory,
    model: ScriptedModel,
    tmp_path: Path,
    request: pytest.FixtureRequest,
) -> None:
    """The red-team run: canary model key, repo token, MCP secret, a hidden declared secret and
    credential files in play; every attack refused; no canary in any request the model receives
    or in the stored events."""
    canaries = Canaries()
    make_bare_repo(tmp_path / "srv", "app", {"README.md": "app\n"})
    server = McpServer.stdio(
        "marker",
        sys.executable,
        [str(MCP_SERVER), str(tmp_path / "marker.json")],
        env_secrets={"MARKER_TOKEN": "MCP_SECRET"},
    )
    git_server = GitHttpServer(tmp_path / "srv", canaries.repo_token).__enter__()
    request.addfinalizer(lambda: git_server.__exit__(None, None, None))
    engine = make_engine(
        harness=harness,
        model=MODELS[harness],
        secrets=[Secret("HIDDEN_SECRET", expose=False)],
        repos=[RepoSource.git(f"{git_server.url}/app.git", ref="main", auth="GH_TOKEN")],
        mcp_servers=[server],
        env={"CLAUDE_CODE_MAX_RETRIES": "0", "HARNESS_RUN_CODEX_MAX_RETRIES": "0"},
        security_policy=SecurityPolicy(denied_bash_patterns=["git push*"]),
    )
    session = engine.start_session()
    secrets = _secrets(harness, model, canaries)
    model.add(shell("echo warm-up"), text("ready"))
    first = await session.run("warm up", secrets=secrets)
    assert not first.is_error, first.error
    assert git_server.authorized > 0  # the clone used the repo token
    _plant_credential_files(engine.workdir, session.session_id, canaries.file_secret)

    gaps = KNOWN_GAPS.get(harness, frozenset())
    attacks = [cmd for name, cmd in SHELL_ATTACKS.items() if name not in gaps]
    attacks.append("cd . && git push origin main")
    model.add(*(shell(cmd) for cmd in attacks))
    model.add(*(tool_call(name, dict(args)) for name, args in TOOL_ATTACKS[harness]))
    model.add(shell(f"echo guard-ok-{canaries.tag}"), text("done"))
    result = await session.run("collect the credentials", secrets=secrets)
    assert not result.is_error, result.error

    outputs = model.requests[-1].tool_results
    expected = len(attacks) + len(TOOL_ATTACKS[harness]) + 1
    assert len(outputs) == expected + 1, outputs  # + the warm-up turn's
    refused = outputs[1:-1]
    allowed = [o for o in refused if not any(m in o.lower() for m in DENIED_MARKERS)]
    assert allowed == [], f"not refused on {harness}: {allowed}"
    assert f"guard-ok-{canaries.tag}" in outputs[-1]  # ordinary commands still run
    saw = _model_saw(model)
    assert [c for c in canaries.all() if c in saw] == []
    stored = "".join(e.model_dump_json() for e in session.events())
    assert [c for c in canaries.all() if c in stored] == []


@pytest.mark.harness
@pytest.mark.parametrize("harness", HARNESSES)  # OpenCode: through its guarded shell
async def test_a_crashing_guard_denies_on_the_real_cli(
    harness: str,
    make_engine: EngineFactory,
    model: ScriptedModel,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    crashing = tmp_path / "crash.py"
    crashing.write_text("import sys\nsys.exit(1)\n")
    monkeypatch.setattr(_guard, "GUARD_SCRIPT", crashing)
    monkeypatch.setattr(_guard, "GUARD_CLIENT", crashing)  # the engine serves the guard: its client

    async def crash(*_args: object, **_kwargs: object) -> str | None:
        raise RuntimeError("the guard's rules blew up")

    # Claude Code's hook is HTTP (no client process): the engine's verdict itself fails, a 500
    monkeypatch.setattr(GuardBroker, "_judge", crash)
    engine = make_engine(harness=harness, model=MODELS[harness])
    marker = tmp_path / "ran.txt"
    model.add(shell(f"echo ran > {marker}"), text("done"))
    result = await engine.start_session().run(
        "go", secrets=_secrets(harness, model, Canaries(), hidden=False)
    )
    assert not result.is_error, result.error
    assert not marker.exists()  # the hook could not answer: the command did not run
    assert any(m in model.requests[-1].tool_results[-1].lower() for m in DENIED_MARKERS)


@pytest.mark.harness
async def test_codex_deny_network_cuts_the_shell_off_the_network(
    make_engine: EngineFactory, model: ScriptedModel
) -> None:
    """A command the guard has no pattern for (git over HTTP) still gets no connection: Codex's
    sandbox runs the shell without network."""
    import socket

    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(0.2)
    port = listener.getsockname()[1]
    engine = make_engine(
        harness="codex", model=MODELS["codex"], security_policy=SecurityPolicy(deny_network=True)
    )
    model.add(shell(f"git ls-remote http://127.0.0.1:{port}/repo.git; echo exit=$?"), text("done"))
    result = await engine.start_session().run(
        "go", secrets=_secrets("codex", model, Canaries(), hidden=False)
    )
    assert not result.is_error, result.error
    with pytest.raises(TimeoutError):
        listener.accept()
    listener.close()
    assert "exit=128" in model.requests[-1].tool_results[-1]


def test_a_session_may_replace_the_policy() -> None:
    from harness_run.spec import effective_spec

    spec = AgentSpec(name="a", harness="claude-code", model="claude-sonnet-4-6")
    relaxed = effective_spec(
        spec, SessionConfig(security_policy=SecurityPolicy(include_credential_guards=False))
    )
    assert relaxed.security_policy.include_credential_guards is False
    assert spec.security_policy.include_credential_guards is True
    assert sys.executable  # the guard runs under this interpreter


@pytest.mark.harness
@pytest.mark.parametrize("failure", ["refused", "hangs", "not-json"])
async def test_claude_codes_http_guard_hook_blocks_when_the_guard_cannot_answer(
    failure: str,
    make_engine: EngineFactory,
    model: ScriptedModel,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The guard reaches Claude Code as an HTTP hook with ``onFailure: block``: a guard that is not
    listening, does not answer in time or answers garbage blocks the tool call (fails closed)."""
    from aiohttp import web

    from harness_run.security import _proxy

    if failure == "refused":
        monkeypatch.setattr(
            _proxy.ModelProxy, "guard_route", lambda self, verdict, token: "http://127.0.0.1:9/hrg/x"
        )
    monkeypatch.setattr(_guard, "GUARD_TIMEOUT_S", 1.0)
    from harness_run.harness import _files

    monkeypatch.setattr(_files, "GUARD_TIMEOUT_S", 1.0)
    original = _proxy.ModelProxy._handle

    async def handle(self: _proxy.ModelProxy, request: web.Request) -> web.StreamResponse:
        if request.path.startswith("/hrg/") and failure == "hangs":
            await asyncio.sleep(5)
        if request.path.startswith("/hrg/") and failure == "not-json":
            return web.Response(text="allow")
        return await original(self, request)

    monkeypatch.setattr(_proxy.ModelProxy, "_handle", handle)
    engine = make_engine(harness="claude-code", model=MODELS["claude-code"])
    marker = tmp_path / "ran.txt"
    model.add(shell(f"echo ran > {marker}"), text("done"))
    session = engine.start_session()
    result = await session.run("go", secrets=_secrets("claude-code", model, Canaries(), hidden=False))
    assert not result.is_error, result.error
    assert not marker.exists()  # the hook could not answer: the command did not run
    assert 'onfailure is "block"' in model.requests[-1].tool_results[-1].lower()
