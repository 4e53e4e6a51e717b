"""The bare harness CLIs, run the way a user (or harness-run's launch plan) runs them, and the
guard hook's command run the way Claude Code and Codex run it: the baselines of the benchmarks."""

from __future__ import annotations

import asyncio
import json
import os
import resource
import subprocess
import time
import uuid
from pathlib import Path
from typing import Any

from benchmarks._common import HARNESS_MODELS, KEY, MODEL, model_secrets, scratch


def claude_binary() -> str:
    from harness_run.harness.claude_code import ClaudeCodeDriver

    return ClaudeCodeDriver().locate()


# what the bare CLI gets from the shell it is run from, as harness-run passes it through to the
# harness (``security/_secrets._PASS_THROUGH``): on this VM the shell sets NODE_EXTRA_CA_CERTS etc.,
# and Node reading that bundle costs ~20 ms at every start — both sides pay it, or neither
_SHELL_VARS = (
    "PATH",
    "LANG",
    "TMPDIR",
    "TERM",
    "SHELL",
    "SSL_CERT_FILE",
    "SSL_CERT_DIR",
    "REQUESTS_CA_BUNDLE",
    "NODE_EXTRA_CA_CERTS",
    "PIP_CERT",
    "CURL_CA_BUNDLE",
    "GIT_SSL_CAINFO",
)


def cli_env(url: str, home: Path) -> dict[str, str]:
    env = {k: os.environ[k] for k in _SHELL_VARS if k in os.environ}
    env.update(
        {
            "ANTHROPIC_BASE_URL": url,
            "ANTHROPIC_API_KEY": KEY,
            "HOME": str(home),
            "CLAUDE_CONFIG_DIR": str(home / ".claude"),
            "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
            "DISABLE_AUTOUPDATER": "1",
            "DISABLE_TELEMETRY": "1",
            "DISABLE_ERROR_REPORTING": "1",
            "IS_SANDBOX": "1",
        }
    )
    return env


def bare_cli_turn(url: str, prompt: str, **where: Any) -> float:
    """One `claude -p` turn exactly as a user would run it headless; returns seconds. ``where``:
    :func:`bare_cli_timed`'s ``resume``, ``session_id``, ``home`` and ``cwd``."""
    return bare_cli_timed(url, prompt, **where)[0]


def bare_two_turns(url: str, prompt: str) -> float:
    """A two-turn session of the bare CLI, ``-p PROMPT`` then ``--resume`` with "again"; seconds."""
    home, cwd = scratch(), scratch()
    sid = str(uuid.uuid4())
    took = bare_cli_turn(url, prompt, session_id=sid, home=home, cwd=cwd)
    return took + bare_cli_turn(url, "again", resume=sid, home=home, cwd=cwd)


def bare_cli_timed(
    url: str,
    prompt: str,
    *extra: str,
    resume: str | None = None,
    session_id: str | None = None,
    home: Path | None = None,
    cwd: Path | None = None,
) -> tuple[float, float]:
    """:func:`bare_cli_turn` with ``extra`` arguments: (wall seconds, CPU seconds of the CLI and the
    children it waited for)."""
    home = home or scratch("home-")
    cwd = cwd or scratch("ws-")
    argv = [
        claude_binary(),
        "-p",
        prompt,
        "--output-format",
        "stream-json",
        "--verbose",
        "--model",
        MODEL,
        "--permission-mode",
        "bypassPermissions",
        *extra,
    ]
    if resume:
        argv += ["--resume", resume]
    elif session_id:
        argv += ["--session-id", session_id]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run(
        argv,
        env=cli_env(url, home),
        cwd=cwd,
        capture_output=True,
        text=True,
        check=False,
        stdin=subprocess.DEVNULL,
    )
    elapsed = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0 or '"is_error":false' not in done.stdout.replace(" ", ""):
        raise SystemExit(f"bare CLI turn failed: {done.stdout[-500:]} {done.stderr[-500:]}")
    return elapsed, (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)


def driver_turn(harness: str, url: str, prompt: str, *, guards: bool = True) -> float:
    """One turn of the bare CLI with exactly the argv, environment, config files and stdin that
    harness-run would use (its driver's launch plan, prepared before the clock starts); seconds.
    ``guards=False``: the same without the credential guards (no guard hook, no deny rules)."""
    from harness_run import AgentSpec, SecurityPolicy
    from harness_run.harness import TurnContext, get_driver
    from harness_run.security._secrets import agent_env

    policy = SecurityPolicy(include_credential_guards=guards)
    spec = AgentSpec(name="bench", harness=harness, model=HARNESS_MODELS[harness], security_policy=policy)  # type: ignore[arg-type]
    root = scratch("plan-")
    home, workspace = root / "home", root / "workspace"
    home.mkdir()
    workspace.mkdir()
    env = agent_env(spec, model_secrets(url, harness), home=str(home), path_prefix=[])
    ctx = TurnContext(
        spec=spec,
        prompt=prompt,
        session_id=str(uuid.uuid4()),
        turn=1,
        workspace=workspace,
        home=home,
        env=env,
        resume=False,
    )
    driver = get_driver(harness)
    plan = driver.launch(ctx)
    for path, text in plan.files.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    parser = driver.parser(ctx)
    start = time.perf_counter()
    proc = subprocess.Popen(
        plan.argv,
        env=plan.env,
        cwd=workspace,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert proc.stdin is not None
    assert proc.stdout is not None
    assert proc.stderr is not None
    proc.stdin.write(plan.stdin or b"")
    proc.stdin.flush()
    if not plan.keep_stdin_open:
        proc.stdin.close()
    for raw in proc.stdout:  # as harness-run does: stdin stays open (steering) until the result
        parser.feed(raw.decode(errors="replace"))
        if parser.finished and not proc.stdin.closed:
            proc.stdin.close()
    stderr = proc.stderr.read()
    proc.wait()
    elapsed = time.perf_counter() - start
    result = parser.finish(proc.returncode, stderr.decode(errors="replace")[-2000:])
    if result.is_error:
        raise SystemExit(f"bare {harness} turn failed: {result.error}")
    return elapsed


# --- the guard hook, as the CLIs run it -----------------------------------------------------------


async def guard_hook_times(policy: Any, command: str, n: int) -> tuple[list[float], list[float]]:
    """ms of ``n`` runs each, alternating, of the guard hook for a Bash tool call of ``command``: as
    an engine's turn has it (the fail-closed wrapper and the small client asking a live guard
    server) and as the self-contained script (what a launch plan outside an engine gets). Each runs
    as Claude Code runs a hook: ``sh -c COMMAND``, the tool call on stdin. A harness-run from before
    the guard was served (no ``GuardBroker``): the script only, and no served times."""
    from harness_run.harness._policy import guard_command

    call = json.dumps({"tool_name": "Bash", "tool_input": {"command": command}}).encode()
    try:
        from harness_run.security import GuardBroker
    except ImportError:
        return [], [await _hook_once(guard_command(policy) or "", call) for _ in range(n)]
    broker = GuardBroker()
    env = broker.substitute(policy, {})
    await broker.start()
    commands = (guard_command(policy, env=env), guard_command(policy))
    served: list[float] = []
    script: list[float] = []
    try:
        for _ in range(n):
            for hook, samples in zip(commands, (served, script), strict=True):
                assert hook is not None
                samples.append(await _hook_once(hook, call))
    finally:
        await broker.aclose()
    return served, script


async def _hook_once(command: str, call: bytes) -> float:
    start = time.perf_counter()
    proc = await asyncio.create_subprocess_exec(
        "/bin/sh", "-c", command, stdin=subprocess.PIPE, stderr=subprocess.PIPE
    )
    _, err = await proc.communicate(call)
    took = (time.perf_counter() - start) * 1000
    assert proc.returncode == 0, err
    return took
