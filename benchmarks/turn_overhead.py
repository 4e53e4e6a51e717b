"""Turn overhead: the same scripted turn through the bare harness CLI and through harness-run.

Alternates the two, ROUNDS times each (after one warm-up), and prints medians and ratios. For every
harness (Claude Code, Codex, OpenCode):
  0. a turn inside a running Python process (`await session.run(...)`) vs the bare CLI run with
     the same flags, environment and config files (the driver's launch plan, prepared up front);
and for Claude Code also:
  1. the in-process turn vs a plain `claude -p PROMPT` turn;
  2. a whole fresh process (`harness-run run SPEC PROMPT --json`, start to exit) vs the bare CLI;
  3. a two-turn session (run + send) vs the CLI's `-p` + `--resume`;
and the client's peak RSS (the Python process only: the model server runs in its own process).
``--two-turn`` measures only (3), against harness-run with its security defaults switched off one by
one (credential guards off; guards and the model proxy off), to show what each default costs.

    python benchmarks/turn_overhead.py [--rounds N] [--harness NAME ...] [--opencode-rounds N]
    python benchmarks/turn_overhead.py --two-turn [--rounds N]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import resource
import subprocess
import sys
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import (
    HARNESS_MODELS,
    KEY,
    MODEL,
    REPO,
    SECURITY_VARIANTS,
    bare_cli_turn,
    driver_turn,
    harness_secrets,
    median,
    report,
    scratch,
    scripted_model,
    security_variant,
    security_variant_engines,
)

PROMPT = "write out.txt"


async def in_process(url: str, rounds: int) -> tuple[list[float], list[float], list[float], list[float]]:
    from harness_run import AgentSpec, local

    spec = AgentSpec(name="bench", harness="claude-code", model=MODEL)
    engine = local.deploy(spec, workdir=scratch("hr-bench-wd-"))
    secrets = {"ANTHROPIC_BASE_URL": url, "ANTHROPIC_API_KEY": KEY}
    bare, ours, bare2, ours2 = [], [], [], []
    for i in range(rounds + 1):
        for order in (0, 1) if i % 2 else (1, 0):
            if order == 0:
                t = bare_cli_turn(url, PROMPT)
                bare.append(t)
                home, cwd = scratch(), scratch()
                sid = str(uuid.uuid4())
                t2 = bare_cli_turn(url, PROMPT, session_id=sid, home=home, cwd=cwd)
                t2 += bare_cli_turn(url, "again", resume=sid, home=home, cwd=cwd)
                bare2.append(t2)
            else:
                session = engine.start_session()
                start = time.perf_counter()
                result = await session.run(PROMPT, secrets=secrets)
                ours.append(time.perf_counter() - start)
                assert not result.is_error, result.error
                session = engine.start_session()
                start = time.perf_counter()
                await session.run(PROMPT, secrets=secrets)
                result = await session.send("again", secrets=secrets)
                ours2.append(time.perf_counter() - start)
                assert not result.is_error, result.error
    engine.close()
    # drop the warm-up round
    return bare[1:], ours[1:], bare2[1:], ours2[1:]


async def same_flags(harness: str, url: str, rounds: int) -> tuple[list[float], list[float]]:
    """The bare CLI with harness-run's own flags vs ``await session.run()``, alternating."""
    from harness_run import AgentSpec, local

    spec = AgentSpec(name="bench", harness=harness, model=HARNESS_MODELS[harness])  # type: ignore[arg-type]
    engine = local.deploy(spec, workdir=scratch("hr-bench-wd-"))
    secrets = harness_secrets(harness, url)
    bare, ours = [], []
    for i in range(rounds + 1):
        for order in (0, 1) if i % 2 else (1, 0):
            if order == 0:
                bare.append(await asyncio.to_thread(driver_turn, harness, url, PROMPT))
            else:
                session = engine.start_session()
                start = time.perf_counter()
                result = await session.run(PROMPT, secrets=secrets)
                ours.append(time.perf_counter() - start)
                assert not result.is_error, result.error
    engine.close()
    return bare[1:], ours[1:]


async def two_turn(url: str, rounds: int) -> dict[str, list[float]]:
    """The two-turn session (run + send): the bare CLI and harness-run's variants, alternating."""
    secrets = {"ANTHROPIC_BASE_URL": url, "ANTHROPIC_API_KEY": KEY}
    engines = security_variant_engines()
    times: dict[str, list[float]] = {"bare": [], **{name: [] for name in SECURITY_VARIANTS}}
    order = ["bare", *SECURITY_VARIANTS]
    for i in range(rounds + 1):
        for name in order if i % 2 else reversed(order):
            if name == "bare":
                home, cwd = scratch(), scratch()
                sid = str(uuid.uuid4())
                t2 = bare_cli_turn(url, PROMPT, session_id=sid, home=home, cwd=cwd)
                t2 += bare_cli_turn(url, "again", resume=sid, home=home, cwd=cwd)
                times[name].append(t2)
                continue
            with security_variant(name):
                session = engines[name].start_session()
                start = time.perf_counter()
                await session.run(PROMPT, secrets=secrets)
                result = await session.send("again", secrets=secrets)
                times[name].append(time.perf_counter() - start)
            assert not result.is_error, result.error
    for engine in {id(e): e for e in engines.values()}.values():
        engine.close()
    return {name: values[1:] for name, values in times.items()}  # drop the warm-up round


def fresh_process(url: str, rounds: int) -> tuple[list[float], list[float], float]:
    spec_file = Path(scratch("hr-bench-spec-")) / "spec.yaml"
    spec_file.write_text(f"name: bench\nharness: claude-code\nmodel: {MODEL}\n")
    workdir = scratch("hr-bench-wd-")
    env = {**os.environ, "ANTHROPIC_BASE_URL": url, "ANTHROPIC_API_KEY": KEY, "HARNESS_RUN_HOME": workdir}
    exe = str(Path(sys.executable).parent / "harness-run")
    argv = [exe, "run", str(spec_file), PROMPT, "--json"]
    bare, ours = [], []
    for i in range(rounds + 1):
        for order in (0, 1) if i % 2 else (1, 0):
            if order == 0:
                bare.append(bare_cli_turn(url, PROMPT))
            else:
                start = time.perf_counter()
                done = subprocess.run(
                    argv, env=env, capture_output=True, text=True, check=False, stdin=subprocess.DEVNULL
                )
                ours.append(time.perf_counter() - start)
                if done.returncode != 0:
                    raise SystemExit(f"harness-run run failed: {done.stdout[-400:]} {done.stderr[-400:]}")
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
    return bare[1:], ours[1:], rss / 1024


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--opencode-rounds", type=int, default=3, help="OpenCode turns take seconds")
    parser.add_argument("--harness", action="append", choices=list(HARNESS_MODELS), help="default: all")
    parser.add_argument(
        "--fresh-only", action="store_true", help="only the fresh `harness-run run` line (and its RSS)"
    )
    parser.add_argument(
        "--two-turn",
        action="store_true",
        help="only the two-turn session, with harness-run's security defaults on and off",
    )
    args = parser.parse_args()
    harnesses = list(dict.fromkeys(args.harness or HARNESS_MODELS))
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(REPO / "harness_run")], check=False)
    ratios: dict[str, float] = {}
    if args.two_turn:
        with scripted_model() as url:
            times = asyncio.run(two_turn(url, args.rounds))
        print(f"rounds: {args.rounds} (after one warm-up), alternating")
        report("bare claude -p + --resume", times["bare"])
        for name in SECURITY_VARIANTS:
            report(f"harness-run run + send, {name}", times[name])
            ratio = median(times[name]) / median(times["bare"])
            print(f"ratio two-turn / bare, {name}: {ratio:.3f}  (aim <= 1.05)")
        return
    if args.fresh_only:
        with scripted_model() as url:
            fbare, fours, rss_fresh = fresh_process(url, args.rounds)
        print(f"rounds: {args.rounds} (after one warm-up), alternating")
        report("bare claude turn (fresh-process series)", fbare)
        report("harness-run run, fresh process", fours)
        print(f"ratio fresh process / bare: {median(fours) / median(fbare):.3f}  (aim <= 1.3)")
        print(f"client peak RSS, fresh `harness-run run`: {rss_fresh:.1f} MB  (aim <= 60)")
        return
    with scripted_model() as url:
        for harness in harnesses:
            rounds = args.opencode_rounds if harness == "opencode" else args.rounds
            bare, ours = asyncio.run(same_flags(harness, url, rounds))
            print(f"[{harness}] rounds: {rounds} (after one warm-up), alternating")
            report(f"[{harness}] bare CLI turn, harness-run's flags", bare)
            report(f"[{harness}] harness-run turn, in process", ours)
            ratios[harness] = median(ours) / median(bare)
            print(f"[{harness}] ratio in-process / bare same flags: {ratios[harness]:.3f}  (aim <= 1.05)")
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
    print(f"ratio in-process / bare: {median(ours) / median(bare):.3f}  (aim <= 1.02)")
    report("bare claude turn (fresh-process series)", fbare)
    report("harness-run run, fresh process", fours)
    print(f"ratio fresh process / bare: {median(fours) / median(fbare):.3f}  (aim <= 1.3)")
    report("bare claude -p + --resume", bare2)
    report("harness-run run + send", ours2)
    print(f"ratio two-turn / bare: {median(ours2) / median(bare2):.3f}  (aim <= 1.05)")
    print(f"client peak RSS, in process: {rss_in:.1f} MB  (aim <= 60)")
    print(f"client peak RSS, fresh `harness-run run`: {rss_fresh:.1f} MB  (aim <= 60)")
    print(
        "summary, in-process / bare with the same flags: "
        + ", ".join(f"{h} {r:.3f}" for h, r in ratios.items())
    )


if __name__ == "__main__":
    main()
