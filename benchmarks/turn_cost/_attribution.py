"""``--variant attribution``: where a harness-run turn's time goes beyond the bare CLI's: one
scripted Claude Code turn with one tool call, each security default switched on in turn.

Whole turns, alternating (after one warm-up round), medians:
  bare_plain      ``claude -p`` as a user types it (no settings file, no hook)
  bare_noguard    the bare CLI with harness-run's argv/env/files but no credential guards
  bare_flags      the same with the guards (the PreToolUse guard hook + deny rules)
  hr_noproxy      ``await session.run()`` with the model proxy off (``HARNESS_RUN_MODEL_PROXY=0``)
  hr              ``await session.run()`` as shipped (guards + proxy + live-home redaction)
(each also as CPU ms of this process and the CLI — less distorted by a loaded machine than wall
time), and, timed inside the ``hr`` turns: the engine's preparation, the CLI process, the end of the
turn (and in it the redaction of the live home), the proxy's start and close, the guard server's
answer per tool call; outside: one guard hook call (p50/p95, served and the script) and the imports
the proxy brings (fresh process).
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import os
import resource
import statistics
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from typing import Any

from benchmarks._cli import bare_cli_turn, driver_turn, guard_hook_times
from benchmarks._common import (
    PROMPT,
    alternating,
    compile_package,
    local_engine,
    model_proxy,
    model_secrets,
    percentile,
    scripted_model,
    timed_turns,
)

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
    engine = local_engine(prefix="d-")
    secrets = model_secrets(url)

    async def ours(proxy: bool) -> float:
        with model_proxy(proxy):
            return await timed_turns(engine.start_session(), secrets)

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
    warm = True
    try:
        for name, measured in alternating(list(variants), rounds):
            if measured and warm:
                SPANS.clear()  # the warm-up round's spans (first aiohttp import) are not a turn's
                warm = False
            before = _cpu()
            took = await variants[name]()
            if measured:
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


def _import_ms(module: str) -> float:
    """Seconds to import ``module`` in a fresh interpreter that already has harness_run imported."""
    code = (
        "import time, harness_run; t = time.perf_counter(); import importlib; "
        f"importlib.import_module({module!r}); print((time.perf_counter() - t) * 1000)"
    )
    out = subprocess.run([sys.executable, "-I", "-c", code], capture_output=True, text=True, check=True)
    return float(out.stdout)


def run(args: argparse.Namespace) -> None:
    from harness_run import SecurityPolicy

    hooks = 3 if args.smoke else 50
    compile_package()
    print(f"load average before: {os.getloadavg()[0]:.2f}")
    _instrument()
    with scripted_model() as url:
        times = asyncio.run(_turns(url, args.rounds))
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
        print(
            f"{name} p50 {percentile(samples, 0.5):.1f}  p95 {percentile(samples, 0.95):.1f}  (n={len(samples)})"
        )
    served, script = asyncio.run(guard_hook_times(SecurityPolicy(), "echo bench > out.txt", hooks))
    for label, samples in (("guard_hook", served or script), ("guard_script", script)):
        print(f"{label}_p50_ms {percentile(samples, 0.5):.1f}")
        print(f"{label}_p95_ms {percentile(samples, 0.95):.1f}")
    for module in () if args.smoke else ("aiohttp.web", "google.auth"):
        try:
            print(f"import_{module.replace('.', '_')}_ms {_import_ms(module):.0f}")
        except subprocess.CalledProcessError:
            print(f"import_{module.replace('.', '_')}_ms (not installed)")
    print(f"load average after: {os.getloadavg()[0]:.2f}")
