"""Where a harness-run turn's time goes beyond the bare CLI's: one scripted Claude Code turn with
one tool call (a shell command, then the answer), each security default switched on in turn.

Whole turns, alternating (after one warm-up round), medians:
  bare_plain      ``claude -p`` as a user types it (no settings file, no hook)
  bare_noguard    the bare CLI with harness-run's argv/env/files but no credential guards
  bare_flags      the same with the guards (the PreToolUse guard hook + deny rules)
  hr_noproxy      ``await session.run()`` with the model proxy off (``HARNESS_RUN_MODEL_PROXY=0``)
  hr              ``await session.run()`` as shipped (guards + proxy + live-home redaction)
(each also as CPU ms of this process and the CLI — less distorted by a loaded machine than wall
time), and, timed inside the ``hr`` turns: the engine's preparation, the CLI process, the end of the turn
(and in it the redaction of the live home), the proxy's start and close, the guard server's answer
per tool call; outside: one guard hook call (p50/p95, served and the script) and the imports the proxy brings (fresh process).

    python benchmarks/turn_attribution.py [--rounds N] [--smoke]
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import KEY, MODEL, REPO, bare_cli_turn, driver_turn, scratch, scripted_model

PROMPT = "write out.txt"
SPANS: dict[str, list[float]] = {}


def _timed_async(name: str, fn: Callable[..., Awaitable[Any]]) -> Callable[..., Awaitable[Any]]:
    @functools.wraps(fn)
    async def wrapper(*args: Any, **kwargs: Any) -> Any:
        start = time.perf_counter()
        try:
            return await fn(*args, **kwargs)
        finally:
            SPANS.setdefault(name, []).append((time.perf_counter() - start) * 1000)

    return wrapper


def _timed(name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        start = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            SPANS.setdefault(name, []).append((time.perf_counter() - start) * 1000)

    return wrapper


def _instrument() -> None:
    """Time the defaults' own steps inside each turn (wrappers only: the code they run is unchanged)."""
    from harness_run.runtime import _process
    from harness_run.runtime.local import _engine
    from harness_run.security import _proxy

    engine_cls = _engine.LocalEngine
    engine_cls._prepare = _timed_async("engine_prepare_ms", engine_cls._prepare)  # type: ignore[method-assign]
    engine_cls._finish = _timed_async("engine_finish_ms", engine_cls._finish)  # type: ignore[method-assign]
    engine_cls._turn = _timed_async("engine_turn_ms", engine_cls._turn)  # type: ignore[method-assign]
    _process.TurnProcess.run = _timed_async("cli_process_ms", _process.TurnProcess.run)  # type: ignore[method-assign]
    try:  # (absent before the guard was served: the script lets this benchmark measure that too)
        from harness_run.security import _guard_broker
    except ImportError:
        pass
    else:
        broker = _guard_broker.GuardBroker
        broker._serve = _timed_async("guard_served_ms", broker._serve)  # type: ignore[method-assign]
    _proxy.ModelProxy.start = _timed_async("proxy_start_ms", _proxy.ModelProxy.start)  # type: ignore[method-assign]
    _proxy.ModelProxy.aclose = _timed_async("proxy_close_ms", _proxy.ModelProxy.aclose)  # type: ignore[method-assign]
    _engine.redact_tree = _timed("home_redaction_ms", _engine.redact_tree)  # type: ignore[attr-defined]


async def _turns(url: str, rounds: int) -> dict[str, list[float]]:
    from harness_run import AgentSpec, local

    engine = local.deploy(AgentSpec(name="bench", harness="claude-code", model=MODEL), workdir=scratch())
    secrets = {"ANTHROPIC_BASE_URL": url, "ANTHROPIC_API_KEY": KEY}

    async def ours(proxy: bool) -> float:
        os.environ["HARNESS_RUN_MODEL_PROXY"] = "1" if proxy else "0"
        try:
            start = time.perf_counter()
            result = await engine.start_session().run(PROMPT, secrets=secrets)
            took = time.perf_counter() - start
        finally:
            os.environ.pop("HARNESS_RUN_MODEL_PROXY", None)
        assert not result.is_error, result.error
        return took

    variants: dict[str, Callable[[], Awaitable[float]]] = {
        "bare_plain": lambda: asyncio.to_thread(bare_cli_turn, url, PROMPT),
        "bare_noguard": lambda: asyncio.to_thread(
            functools.partial(driver_turn, "claude-code", url, PROMPT, guards=False)
        ),
        "bare_flags": lambda: asyncio.to_thread(driver_turn, "claude-code", url, PROMPT),
        "hr_noproxy": lambda: ours(False),
        "hr": lambda: ours(True),
    }
    times: dict[str, list[float]] = {name: [] for name in variants}
    names = list(variants)
    try:
        for i in range(rounds + 1):
            order = names if i % 2 else names[::-1]
            if i == 1:
                SPANS.clear()  # the warm-up round's spans (first aiohttp import) are not a turn's
            for name in order:
                before = _cpu()
                took = await variants[name]()
                if i:
                    times[name].append(took * 1000)
                    times.setdefault(f"cpu_{name}", []).append(_cpu() - before)
    finally:
        engine.close()
    return times


def _cpu() -> float:
    """CPU ms used so far by this process and its waited-for children (the CLI, its hooks and tools;
    not the scripted model, which has its own process): less distorted by a loaded machine than
    wall time."""
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return (own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime) * 1000


async def _hooks(n: int) -> tuple[list[float], list[float]]:
    """One guard hook call as Claude Code makes it (``sh -c COMMAND``, the tool call on stdin):
    through a guard server as an engine's turn has it, and the self-contained script; alternating."""
    from harness_run import SecurityPolicy
    from harness_run.harness._policy import guard_command

    try:
        from harness_run.security import GuardBroker
    except ImportError:  # before the guard was served: the script only
        script = [await _hook_once(guard_command(SecurityPolicy()) or "") for _ in range(n)]
        return [], script
    broker = GuardBroker()
    env = broker.substitute(SecurityPolicy(), {})
    await broker.start()
    commands = (guard_command(SecurityPolicy(), env=env), guard_command(SecurityPolicy()))
    served: list[float] = []
    script: list[float] = []
    try:
        for _ in range(n):
            for command, samples in zip(commands, (served, script), strict=True):
                assert command is not None
                samples.append(await _hook_once(command))
    finally:
        await broker.aclose()
    return served, script


async def _hook_once(command: str) -> float:
    call = json.dumps({"tool_name": "Bash", "tool_input": {"command": "echo bench > out.txt"}}).encode()
    start = time.perf_counter()
    proc = await asyncio.create_subprocess_exec(
        "/bin/sh", "-c", command, stdin=subprocess.PIPE, stderr=subprocess.PIPE
    )
    _, err = await proc.communicate(call)
    assert proc.returncode == 0, err
    return (time.perf_counter() - start) * 1000


def _import_ms(module: str) -> float:
    """Seconds to import ``module`` in a fresh interpreter that already has harness_run imported."""
    code = (
        "import time, harness_run; t = time.perf_counter(); import importlib; "
        f"importlib.import_module({module!r}); print((time.perf_counter() - t) * 1000)"
    )
    out = subprocess.run([sys.executable, "-I", "-c", code], capture_output=True, text=True, check=True)
    return float(out.stdout)


def _pct(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--smoke", action="store_true", help="one round (CI smoke test)")
    args = parser.parse_args()
    rounds, hooks = (1, 3) if args.smoke else (args.rounds, 50)
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(REPO / "harness_run")], check=False)
    print(f"load average before: {os.getloadavg()[0]:.2f}")
    _instrument()
    with scripted_model() as url:
        times = asyncio.run(_turns(url, rounds))
    medians = {name: statistics.median(samples) for name, samples in times.items()}
    for name, value in medians.items():
        print(f"turn_{name}_ms {value:.0f}  (min {min(times[name]):.0f}, max {max(times[name]):.0f})")
    base = medians["bare_plain"]
    for name, value in list(medians.items()):
        if not name.startswith("cpu_"):
            print(
                f"ratio_{name} {value / base:.3f}  (cpu {medians[f'cpu_{name}'] / medians['cpu_bare_plain']:.3f})"
            )
    print(f"added_guard_defaults_ms {medians['bare_flags'] - medians['bare_noguard']:.0f}")
    print(f"added_flags_files_ms {medians['bare_noguard'] - base:.0f}")
    print(f"added_engine_ms {medians['hr_noproxy'] - medians['bare_flags']:.0f}")
    print(f"added_proxy_ms {medians['hr'] - medians['hr_noproxy']:.0f}")
    cpu = {name.removeprefix("cpu_"): value for name, value in medians.items() if name.startswith("cpu_")}
    print(f"added_cpu_guard_defaults_ms {cpu['bare_flags'] - cpu['bare_noguard']:.0f}")
    print(f"added_cpu_engine_ms {cpu['hr_noproxy'] - cpu['bare_flags']:.0f}")
    print(f"added_cpu_proxy_ms {cpu['hr'] - cpu['hr_noproxy']:.0f}")
    for name, samples in sorted(SPANS.items()):
        print(f"{name} p50 {_pct(samples, 0.5):.1f}  p95 {_pct(samples, 0.95):.1f}  (n={len(samples)})")
    served, script = asyncio.run(_hooks(hooks))
    for label, samples in (("guard_hook", served or script), ("guard_script", script)):
        print(f"{label}_p50_ms {_pct(samples, 0.5):.1f}")
        print(f"{label}_p95_ms {_pct(samples, 0.95):.1f}")
    for module in () if args.smoke else ("aiohttp.web", "google.auth"):
        try:
            print(f"import_{module.replace('.', '_')}_ms {_import_ms(module):.0f}")
        except subprocess.CalledProcessError:
            print(f"import_{module.replace('.', '_')}_ms (not installed)")
    print(f"load average after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
