"""Shared setup of the benchmarks: scratch directories, the scripted model in its own process, the
model's secrets, local engines and timed turns, harness-run's security defaults on and off, and how
numbers are taken and printed (alternating rounds, medians, percentiles, ratios).

The bare CLIs are in ``_cli``, the team server, Docker and the test cluster in ``_services``.
"""

from __future__ import annotations

import asyncio
import atexit
import base64
import importlib
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Callable, Coroutine, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
_SCRATCH = Path(tempfile.mkdtemp(prefix="hr-bench-"))
atexit.register(shutil.rmtree, _SCRATCH, ignore_errors=True)


def scratch(prefix: str = "d-") -> Path:
    """A temporary directory removed when the benchmark exits."""
    return Path(tempfile.mkdtemp(prefix=prefix, dir=_SCRATCH))


def compile_package(check: bool = False) -> None:
    """``python -m compileall -q harness_run``: imports are timed without recompiling the library
    (machines that set PYTHONDONTWRITEBYTECODE=1 would recompile it in every subprocess)."""
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(REPO / "harness_run")], check=check)


def testkit(module: str) -> Any:
    """``tests/testkit/<module>`` (the git server, the test cluster, the provider doubles...):
    test infrastructure, outside the installed package."""
    tests = str(REPO / "tests")
    if tests not in sys.path:
        sys.path.insert(0, tests)
    return importlib.import_module(f"testkit.{module}")


def repo_files(count: int) -> dict[str, str]:
    """The benchmarks' repository: ``count`` Python files of 20 lines in 40 packages."""
    return {f"pkg{i % 40}/mod{i}.py": f"VALUE = {i}\n" * 20 for i in range(count)}


# --- the scripted model ---------------------------------------------------------------------------

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
PROMPT = "write out.txt"
"""The prompt of the scripted turn (the model's rules ignore it)."""
HARNESS_MODELS = {"claude-code": MODEL, "codex": "gpt-5.6-luna", "opencode": "openai/gpt-5.1"}


@contextmanager
def scripted_model(script: str = RULES_SCRIPT) -> Iterator[str]:
    """Start `harness-run mock-model` in a subprocess (so its CPU and memory are not the client's)
    with the rules of ``script``; its URL."""
    tmp = scratch("model-")
    rules = tmp / "script.yaml"
    rules.write_text(script)
    proc = subprocess.Popen(
        [sys.executable, "-m", "harness_run", "mock-model", "--script", str(rules), "--port", "0"],
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


def model_secrets(url: str, harness: str = "claude-code") -> dict[str, str]:
    """The run's endpoint and the dummy key for ``harness`` against the scripted model at ``url``."""
    if harness == "claude-code":
        return {"ANTHROPIC_BASE_URL": url, "ANTHROPIC_API_KEY": KEY}
    return {"OPENAI_BASE_URL": f"{url}/v1", "OPENAI_API_KEY": KEY}


STREAMED_MESSAGES = json.dumps(
    {"model": MODEL, "max_tokens": 100, "stream": True, "messages": [{"role": "user", "content": "hi"}]}
).encode()


def messages_request(base: str, key: str = KEY, proxy: str | None = None, auth: str | None = None) -> float:
    """ms of one streamed Messages request to ``base`` on a new connection: direct, or through the
    HTTP proxy ``proxy`` (with ``auth`` as the worker's token)."""
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({"http": proxy} if proxy else {}))
    headers = {"x-api-key": key, "content-type": "application/json", "anthropic-version": "2023-06-01"}
    if auth:
        headers["Proxy-Authorization"] = "Basic " + base64.b64encode(f"worker:{auth}".encode()).decode()
    request = urllib.request.Request(f"{base}/v1/messages", data=STREAMED_MESSAGES, headers=headers)
    start = time.perf_counter()
    with opener.open(request, timeout=30) as answer:
        answer.read()
    return (time.perf_counter() - start) * 1000


class Loop:
    """An event loop in a thread of its own, for servers that must answer while this thread blocks."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        threading.Thread(target=self.loop.run_forever, daemon=True).start()

    def run[T](self, coro: Coroutine[Any, Any, T], timeout: float = 30) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)


# --- engines and turns ------------------------------------------------------------------------------


def claude_spec(name: str = "bench", **fields: Any) -> Any:
    """A Claude Code ``AgentSpec`` on the scripted model's model name, with ``fields`` on top."""
    from harness_run import AgentSpec

    return AgentSpec(name=name, harness="claude-code", model=MODEL, **fields)


def local_engine(spec: Any = None, prefix: str = "hr-bench-wd-", **options: Any) -> Any:
    """``local.deploy`` of ``spec`` (default: :func:`claude_spec`) in a new scratch workdir (or
    ``options["workdir"]``). The caller closes it."""
    from harness_run import local

    workdir = options.pop("workdir", None) or scratch(prefix)
    return local.deploy(spec if spec is not None else claude_spec(), workdir=workdir, **options)


async def timed_turns(session: Any, secrets: dict[str, str], *prompts: str) -> float:
    """Seconds for ``await session.run(first)`` and ``await session.send(...)`` of each prompt after
    it (default: the one scripted turn); a failed turn stops the benchmark."""
    first, *more = prompts or (PROMPT,)
    start = time.perf_counter()
    result = await session.run(first, secrets=secrets)
    for prompt in more:
        result = await session.send(prompt, secrets=secrets)
    took = time.perf_counter() - start
    if result.is_error:
        raise SystemExit(f"the turn failed: {result.error}")
    return took


# --- harness-run's security defaults on and off (Claude Code) -------------------------------------

SECURITY_VARIANTS = ("defaults", "no credential guards", "no guards, no model proxy")


def security_variant_engines() -> dict[str, Any]:
    """A local Claude Code engine per :data:`SECURITY_VARIANTS` name (the last two share one: the
    proxy is switched per turn by :func:`security_variant`). The caller closes them."""
    policies: dict[str, Any] = {"defaults": {}, "no credential guards": {"include_credential_guards": False}}
    engines = {
        name: local_engine(claude_spec(security_policy=policy), "hr-bench-wd-")
        for name, policy in policies.items()
    }
    engines["no guards, no model proxy"] = engines["no credential guards"]
    return engines


def close_all(engines: dict[str, Any]) -> None:
    """Close each engine of ``engines`` once (variants may share one)."""
    for engine in {id(e): e for e in engines.values()}.values():
        engine.close()


@contextmanager
def security_variant(name: str) -> Iterator[None]:
    """The model proxy as the variant ``name`` has it, for the turns run inside."""
    with model_proxy("no model proxy" not in name):
        yield


@contextmanager
def model_proxy(on: bool) -> Iterator[None]:
    """``HARNESS_RUN_MODEL_PROXY`` on or off for the turns run inside."""
    os.environ["HARNESS_RUN_MODEL_PROXY"] = "1" if on else "0"
    try:
        yield
    finally:
        os.environ.pop("HARNESS_RUN_MODEL_PROXY", None)


# --- taking and printing numbers ------------------------------------------------------------------


def alternating[T](names: Sequence[T], rounds: int) -> Iterator[tuple[T, bool]]:
    """``rounds`` + 1 rounds over ``names``: in order in odd rounds, reversed in even ones (so no
    variant always goes first); the second item is False in round 0, a warm-up not to be counted."""
    for i in range(rounds + 1):
        for name in names if i % 2 else tuple(reversed(names)):
            yield name, i > 0


def median(values: Sequence[float]) -> float:
    return statistics.median(values)


def percentile(values: Sequence[float], q: float) -> float:
    """The ``q`` quantile (0..1) of ``values``, nearest rank; NaN for none."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))] if ordered else float("nan")


def median_call(fn: Callable[[], object], runs: int, scale: float = 1000) -> float:
    """The median time of ``runs`` calls of ``fn``, in seconds times ``scale`` (1000: ms, 1e6: µs)."""
    samples: list[float] = []
    for _ in range(runs):
        start = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - start) * scale)
    return statistics.median(samples)


def import_ms(statement: str, runs: int) -> float:
    """The median ms of ``statement`` (an import) in ``runs`` fresh interpreters."""
    code = f"import time; t = time.perf_counter(); {statement}; print((time.perf_counter() - t) * 1000)"
    samples = [
        float(
            subprocess.run(
                [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=REPO
            ).stdout
        )
        for _ in range(runs)
    ]
    return statistics.median(samples)


def ms_since(start: float) -> float:
    """Milliseconds since ``start`` (a ``time.perf_counter()``)."""
    return (time.perf_counter() - start) * 1000


def report(label: str, values: Sequence[float], unit: str = "s") -> None:
    print(
        f"{label}: median {median(values):.3f} {unit}  min {min(values):.3f}  max {max(values):.3f}  "
        f"(n={len(values)})"
    )


def ratio(label: str, ours: Sequence[float], base: Sequence[float], aim: str = "") -> float:
    """Print ``label: median(ours) / median(base)`` (3 decimals, and the aim if given); the ratio."""
    value = median(ours) / median(base)
    print(f"{label}: {value:.3f}" + (f"  (aim {aim})" if aim else ""))
    return value
