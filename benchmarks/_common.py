"""Shared pieces of the benchmark scripts: a scripted model in its own process, the bare CLI, stats."""

from __future__ import annotations

import atexit
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
_SCRATCH = Path(tempfile.mkdtemp(prefix="hr-bench-"))
atexit.register(shutil.rmtree, _SCRATCH, ignore_errors=True)


def scratch(prefix: str = "d-") -> Path:
    """A temporary directory removed when the benchmark exits."""
    return Path(tempfile.mkdtemp(prefix=prefix, dir=_SCRATCH))


# Every request without a tool result gets a shell call; every continuation gets the final text.
RULES_SCRIPT = """\
- rules:
    - tool_result: false
      reply: {shell: "echo bench > out.txt"}
    - tool_result: true
      reply: {text: "done"}
"""
MODEL = "claude-sonnet-4-6"
KEY = "scripted-bench-key"
"""The dummy model key. Not a word that occurs elsewhere: a secret value is redacted wherever it
appears, and a launch plan whose paths hold it is never cached (a key of ``bench`` matched the
``hr-bench-`` scratch paths, so every fresh run missed the spawn-first cache and every event was
rewritten)."""


@contextmanager
def scripted_model() -> Iterator[str]:
    """Start `harness-run mock-model` in a subprocess (so its CPU and memory are not the client's)."""
    tmp = scratch("model-")
    script = tmp / "script.yaml"
    script.write_text(RULES_SCRIPT)
    proc = subprocess.Popen(
        [sys.executable, "-m", "harness_run", "mock-model", "--script", str(script), "--port", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    assert proc.stdout is not None
    url = None
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        found = re.search(r"http://127\.0\.0\.1:\d+", line)
        if found:
            url = found.group(0)
            break
    if url is None:
        proc.kill()
        raise SystemExit("the scripted model did not start")
    # Keep reading its output: a pipe nobody reads fills (64 KiB of request logs) and then blocks the
    # server mid-request, which hangs the turn that is waiting on it.
    threading.Thread(target=proc.stdout.read, daemon=True).start()
    try:
        yield url
    finally:
        proc.terminate()
        proc.wait(10)


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
    import resource

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


def median(values: list[float]) -> float:
    return statistics.median(values)


def report(label: str, values: list[float], unit: str = "s") -> None:
    print(
        f"{label}: median {median(values):.3f} {unit}  min {min(values):.3f}  max {max(values):.3f}  "
        f"(n={len(values)})"
    )


# --- harness-run's security defaults on and off (Claude Code) -------------------------------------

SECURITY_VARIANTS = ("defaults", "no credential guards", "no guards, no model proxy")


def security_variant_engines() -> dict[str, Any]:
    """A local Claude Code engine per :data:`SECURITY_VARIANTS` name (the last two share one: the
    proxy is switched per turn by :func:`security_variant`). The caller closes them."""
    from harness_run import AgentSpec, local

    policies: dict[str, Any] = {"defaults": {}, "no credential guards": {"include_credential_guards": False}}
    engines = {
        name: local.deploy(
            AgentSpec(name="bench", harness="claude-code", model=MODEL, security_policy=policy),
            workdir=scratch("hr-bench-wd-"),
        )
        for name, policy in policies.items()
    }
    engines["no guards, no model proxy"] = engines["no credential guards"]
    return engines


@contextmanager
def security_variant(name: str) -> Iterator[None]:
    """The model proxy as the variant ``name`` has it, for the turns run inside."""
    os.environ["HARNESS_RUN_MODEL_PROXY"] = "0" if name.endswith("no model proxy") else "1"
    try:
        yield
    finally:
        os.environ.pop("HARNESS_RUN_MODEL_PROXY", None)


# --- every harness, with the flags harness-run uses ----------------------------------------------

HARNESS_MODELS = {"claude-code": MODEL, "codex": "gpt-5.6-luna", "opencode": "openai/gpt-5.1"}


def harness_secrets(harness: str, url: str) -> dict[str, str]:
    """The run's endpoint and a dummy key for ``harness`` against the scripted model at ``url``."""
    if harness == "claude-code":
        return {"ANTHROPIC_BASE_URL": url, "ANTHROPIC_API_KEY": KEY}
    return {"OPENAI_BASE_URL": f"{url}/v1", "OPENAI_API_KEY": KEY}


def driver_turn(harness: str, url: str, prompt: str, *, guards: bool = True) -> float:
    """One turn of the bare CLI with exactly the argv, environment, config files and stdin that
    harness-run would use (its driver's launch plan, prepared before the clock starts); seconds.
    ``guards=False``: the same without the credential guards (no guard hook, no deny rules)."""
    import uuid

    from harness_run import AgentSpec, SecurityPolicy
    from harness_run.harness import TurnContext, get_driver
    from harness_run.security._secrets import agent_env

    policy = SecurityPolicy(include_credential_guards=guards)
    spec = AgentSpec(name="bench", harness=harness, model=HARNESS_MODELS[harness], security_policy=policy)  # type: ignore[arg-type]
    root = scratch("plan-")
    home, workspace = root / "home", root / "workspace"
    home.mkdir()
    workspace.mkdir()
    env = agent_env(spec, harness_secrets(harness, url), home=str(home), path_prefix=[])
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
