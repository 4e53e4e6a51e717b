"""The whole-turn comparisons: in process, a fresh process, a two-turn session (``overview``,
``fresh-process``, ``two-turn``)."""

from __future__ import annotations

import argparse
import asyncio
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

from benchmarks._cli import bare_cli_turn, bare_two_turns, driver_turn
from benchmarks._common import (
    HARNESS_MODELS,
    KEY,
    MODEL,
    PROMPT,
    SECURITY_VARIANTS,
    alternating,
    close_all,
    compile_package,
    local_engine,
    model_secrets,
    ratio,
    report,
    scratch,
    scripted_model,
    security_variant,
    security_variant_engines,
    timed_turns,
)


async def in_process(url: str, rounds: int) -> tuple[list[float], list[float], list[float], list[float]]:
    """A turn and a two-turn session in process vs plain ``claude -p`` (and ``--resume``)."""
    engine = local_engine()
    secrets = model_secrets(url)
    bare, ours, bare2, ours2 = [], [], [], []
    for side, measured in alternating(("bare", "ours"), rounds):
        if side == "bare":
            one, two = bare_cli_turn(url, PROMPT), bare_two_turns(url, PROMPT)
            if measured:
                bare.append(one)
                bare2.append(two)
        else:
            one = await timed_turns(engine.start_session(), secrets)
            two = await timed_turns(engine.start_session(), secrets, PROMPT, "again")
            if measured:
                ours.append(one)
                ours2.append(two)
    engine.close()
    return bare, ours, bare2, ours2


async def same_flags(harness: str, url: str, rounds: int) -> tuple[list[float], list[float]]:
    """The bare CLI with harness-run's own flags vs ``await session.run()``, alternating."""
    from harness_run import AgentSpec

    spec = AgentSpec(name="bench", harness=harness, model=HARNESS_MODELS[harness])  # type: ignore[arg-type]
    engine = local_engine(spec)
    secrets = model_secrets(url, harness)
    bare, ours = [], []
    for side, measured in alternating(("bare", "ours"), rounds):
        if side == "bare":
            took = await asyncio.to_thread(driver_turn, harness, url, PROMPT)
        else:
            took = await timed_turns(engine.start_session(), secrets)
        if measured:
            (bare if side == "bare" else ours).append(took)
    engine.close()
    return bare, ours


async def two_turn(url: str, rounds: int) -> dict[str, list[float]]:
    """The two-turn session (run + send): the bare CLI and harness-run's variants, alternating."""
    secrets = model_secrets(url)
    engines = security_variant_engines()
    times: dict[str, list[float]] = {"bare": [], **{name: [] for name in SECURITY_VARIANTS}}
    for name, measured in alternating(["bare", *SECURITY_VARIANTS], rounds):
        if name == "bare":
            took = bare_two_turns(url, PROMPT)
        else:
            with security_variant(name):
                took = await timed_turns(engines[name].start_session(), secrets, PROMPT, "again")
        if measured:
            times[name].append(took)
    close_all(engines)
    return times


def fresh_process(url: str, rounds: int) -> tuple[list[float], list[float], float]:
    """A whole fresh ``harness-run run`` vs the bare CLI, and the peak RSS of one such process."""
    spec_file = scratch("hr-bench-spec-") / "spec.yaml"
    spec_file.write_text(f"name: bench\nharness: claude-code\nmodel: {MODEL}\n")
    workdir = scratch("hr-bench-wd-")
    env = {
        **os.environ,
        "ANTHROPIC_BASE_URL": url,
        "ANTHROPIC_API_KEY": KEY,
        "HARNESS_RUN_HOME": str(workdir),
    }
    exe = str(Path(sys.executable).parent / "harness-run")
    argv = [exe, "run", str(spec_file), PROMPT, "--json"]
    bare, ours = [], []
    for side, measured in alternating(("bare", "ours"), rounds):
        if side == "bare":
            took = bare_cli_turn(url, PROMPT)
        else:
            start = time.perf_counter()
            done = subprocess.run(
                argv, env=env, capture_output=True, text=True, check=False, stdin=subprocess.DEVNULL
            )
            took = time.perf_counter() - start
            if done.returncode != 0:
                raise SystemExit(f"harness-run run failed: {done.stdout[-400:]} {done.stderr[-400:]}")
        if measured:
            (bare if side == "bare" else ours).append(took)
    # peak RSS of one fresh `harness-run run` Python process (children excluded)
    # VmHWM, the process's own peak: ru_maxrss would also count this benchmark's memory, which the
    # child's exec starts from (Linux keeps the pre-exec image's high-water mark in ru_maxrss)
    probe = (
        "import sys; from harness_run.cli import main; code = main(sys.argv[1:]); "
        "hwm = next(l for l in open('/proc/self/status') if l.startswith('VmHWM')).split()[1]; "
        "sys.stderr.write(f'RSS_KB={hwm}\\n'); sys.exit(code)"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe, *argv[1:]],
        env=env,
        cwd=workdir,  # `python -c` puts the working directory first on sys.path: not a shared /tmp
        capture_output=True,
        text=True,
        check=False,
        stdin=subprocess.DEVNULL,
    )
    rss = next(
        (int(line.split("=")[1]) for line in done.stderr.splitlines() if line.startswith("RSS_KB=")), 0
    )
    return bare, ours, rss / 1024


def two_turn_only(args: argparse.Namespace) -> None:
    compile_package()
    with scripted_model() as url:
        times = asyncio.run(two_turn(url, args.rounds))
    print(f"rounds: {args.rounds} (after one warm-up), alternating")
    report("bare claude -p + --resume", times["bare"])
    for name in SECURITY_VARIANTS:
        report(f"harness-run run + send, {name}", times[name])
        ratio(f"ratio two-turn / bare, {name}", times[name], times["bare"], "<= 1.05")


def fresh_only(args: argparse.Namespace) -> None:
    compile_package()
    with scripted_model() as url:
        fbare, fours, rss_fresh = fresh_process(url, args.rounds)
    print(f"rounds: {args.rounds} (after one warm-up), alternating")
    report("bare claude turn (fresh-process series)", fbare)
    report("harness-run run, fresh process", fours)
    ratio("ratio fresh process / bare", fours, fbare, "<= 1.3")
    print(f"client peak RSS, fresh `harness-run run`: {rss_fresh:.1f} MB  (aim <= 60)")


def overview(args: argparse.Namespace) -> None:
    harnesses = list(dict.fromkeys(args.harness or HARNESS_MODELS))
    compile_package()
    ratios: dict[str, float] = {}
    with scripted_model() as url:
        for harness in harnesses:
            rounds = args.opencode_rounds if harness == "opencode" else args.rounds
            bare, ours = asyncio.run(same_flags(harness, url, rounds))
            print(f"[{harness}] rounds: {rounds} (after one warm-up), alternating")
            report(f"[{harness}] bare CLI turn, harness-run's flags", bare)
            report(f"[{harness}] harness-run turn, in process", ours)
            ratios[harness] = ratio(f"[{harness}] ratio in-process / bare same flags", ours, bare, "<= 1.05")
        if "claude-code" not in harnesses:
            print(
                "summary, in-process / bare same flags: "
                + ", ".join(f"{h} {r:.3f}" for h, r in ratios.items())
            )
            return
        bare, ours, bare2, ours2 = asyncio.run(in_process(url, args.rounds))
        rss_in = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        fbare, fours, rss_fresh = fresh_process(url, args.rounds)
    print(f"rounds: {args.rounds} (after one warm-up), alternating")
    report("bare claude turn", bare)
    report("harness-run turn, in process", ours)
    ratio("ratio in-process / bare", ours, bare, "<= 1.02")
    report("bare claude turn (fresh-process series)", fbare)
    report("harness-run run, fresh process", fours)
    ratio("ratio fresh process / bare", fours, fbare, "<= 1.3")
    report("bare claude -p + --resume", bare2)
    report("harness-run run + send", ours2)
    ratio("ratio two-turn / bare", ours2, bare2, "<= 1.05")
    print(f"client peak RSS, in process: {rss_in:.1f} MB  (aim <= 60)")
    print(f"client peak RSS, fresh `harness-run run`: {rss_fresh:.1f} MB  (aim <= 60)")
    print(
        "summary, in-process / bare with the same flags: "
        + ", ".join(f"{h} {r:.3f}" for h, r in ratios.items())
    )
