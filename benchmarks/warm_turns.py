"""Warm harness processes: turns on a parked or pooled Claude Code process vs the bare `claude -p`.

The scripted turn of ``turn_cost`` (one shell tool call, then the answer: two model requests), the
scripted model in its own process. Every variant alternates round by round, after one warm-up round;
medians and same-run ratios:

  two-turn       a session's two turns (``run`` + ``run``) on an engine with the defaults (the
                 session's CLI is parked after its first turn and takes the second on its stdin) vs
                 bare ``claude -p`` + ``claude -p --resume``; and the same with ``idle_ttl=0`` (a
                 process per turn, as before) for contrast
  pooled         a new session's first turn on an engine with ``warm_pool=1`` (the pool filled, and
                 its CLI booted for 1 s, before the clock starts; ``start_session()`` is timed, and
                 the pool's refill runs during the turn, as it does for a user) vs one bare turn;
                 and a first turn without a pool for contrast
  served         through ``harness-run serve --warm-pool 1`` on 127.0.0.1 with an API key: a new
                 session's first turn (on the pooled process; ``start_session()`` timed) and its
                 second turn (on the parked one), each vs one bare turn

The model's endpoint and key are in the engines' (and the server's) environment, as a user has them
exported, and each turn passes them too: a pooled process gets the model proxy only when its engine
sees them when it starts it (``--no-env-key``: only in the turns' secrets; the pooled processes'
launch plans then differ from the turns', so no turn takes them).

Each round's sessions are closed (deleted, served) after they are timed and the pools refilled, so
every round starts alike. Whether the turns really ran on the kept processes is checked (pids) and
printed. ``--load``: 64 sessions x 2 turns at once on one engine with the defaults: failures, and the
parked processes left after (at most ``max_idle_processes``, 4) with their memory.

    python -m benchmarks warm_turns [--rounds N] [--load] [--load-sessions N] [--no-env-key]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import time
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

from benchmarks._cli import bare_cli_turn, bare_two_turns
from benchmarks._common import (
    PROMPT,
    alternating,
    claude_spec,
    compile_package,
    local_engine,
    model_secrets,
    percentile,
    ratio,
    report,
    scratch,
    scripted_model,
    timed_turns,
)
from benchmarks._services import make_key, start_server, stop_server

AGAIN = "again"
"""The second turn's prompt (as ``bare_two_turns``'s)."""
SETTLE_S = 1.0
"""How long a pooled CLI has been started before a timed turn may take it (it has booted)."""
MAX_IDLE = 4
"""``local.deploy``'s default ``max_idle_processes``: the cap the load checks."""
TARGETS = {"two-turn": 0.7, "pooled": 0.6, "served": 0.7}

# --- processes, from /proc ----------------------------------------------------------------------


def _stat(pid: int) -> list[str] | None:
    """The fields of /proc/PID/stat after the command name (state first), or None when gone."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def _alive(pid: int) -> bool:
    fields = _stat(pid)
    return fields is not None and fields[0] != "Z"


def _age_s(pid: int) -> float:
    """Seconds since ``pid`` started (0 when gone)."""
    fields = _stat(pid)
    if fields is None:
        return 0.0
    uptime = float(Path("/proc/uptime").read_text().split()[0])
    return uptime - int(fields[19]) / os.sysconf("SC_CLK_TCK")


def claude_processes(root: int) -> set[int]:
    """The live ``claude`` processes among the descendants of ``root``."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and (fields := _stat(int(entry.name))) is not None and fields[0] != "Z":
            children.setdefault(int(fields[1]), []).append(int(entry.name))
    found: set[int] = set()
    todo = list(children.get(root, []))
    while todo:
        pid = todo.pop()
        todo.extend(children.get(pid, []))
        try:
            if Path(f"/proc/{pid}/comm").read_text().strip() == "claude":
                found.add(pid)
        except OSError:
            continue
    return found


def _of_session(pids: set[int], session_id: str) -> set[int]:
    """The processes of ``pids`` started for ``session_id`` (it is on their command line)."""
    found: set[int] = set()
    for pid in pids:
        try:
            if session_id.encode() in Path(f"/proc/{pid}/cmdline").read_bytes():
                found.add(pid)
        except OSError:
            continue
    return found


def rss_mb(pids: set[int]) -> float:
    total = 0
    for pid in pids:
        try:
            status = Path(f"/proc/{pid}/status").read_text()
        except OSError:
            continue
        total += next((int(line.split()[1]) for line in status.splitlines() if line.startswith("VmRSS:")), 0)
    return total / 1024


async def _gone(pids: list[int], timeout: float = 10) -> None:
    deadline = time.monotonic() + timeout
    while any(_alive(pid) for pid in pids) and time.monotonic() < deadline:  # noqa: ASYNC110 (polls /proc)
        await asyncio.sleep(0.02)


# --- local engines --------------------------------------------------------------------------------


def _kept(engine: Any, session_id: str) -> int | None:
    """The pid of the process ``engine`` keeps for ``session_id``, if any."""
    return next((w.pid for w in engine.warm_processes() if w.session_id == session_id), None)


async def _close(engine: Any, session: Any) -> None:
    """End the session here (its parked process goes) and wait until its process is gone."""
    pids = [w.pid for w in engine.warm_processes() if w.session_id == session.session_id]
    await session.aclose()
    await _gone(pids)


async def _settled_pool(engine: Any) -> tuple[str, int]:
    """Fill the engine's pool, and wait until its process has been started ``SETTLE_S``: its
    session id and pid."""
    await engine.fill_pool()
    pooled = [w for w in engine.warm_processes() if w.state == "pooled"]
    if not pooled:
        raise SystemExit("the warm pool did not fill (see the engine's log: is warm_pool off?)")
    if (wait := SETTLE_S - pooled[0].idle_s) > 0:
        await asyncio.sleep(wait)
    return pooled[0].session_id, pooled[0].pid


class Rounds:
    """The alternating series: samples per name, and how often the kept process took the turn."""

    def __init__(self, url: str, engines: dict[str, Any], served: Served) -> None:
        self.url = url
        self.secrets = model_secrets(url)
        self.engines = engines
        self.served = served
        self.times: dict[str, list[float]] = {}
        self.kept: dict[str, list[bool]] = {}

    def variants(self) -> dict[str, Callable[[], Coroutine[Any, Any, dict[str, float]]]]:
        return {
            "bare two-turn": self.bare_two,
            "warm two-turn": lambda: self.two_turn("warm"),
            "idle_ttl=0 two-turn": lambda: self.two_turn("cold"),
            "bare turn": self.bare_one,
            "pooled first turn": self.pooled,
            "first turn, no pool": self.no_pool,
            "served": self.served_turns,
        }

    async def run(self, rounds: int) -> None:
        variants = self.variants()
        for name, measured in alternating(list(variants), rounds):
            samples = await variants[name]()
            if measured:
                for key, value in samples.items():
                    self.times.setdefault(key, []).append(value)
            else:
                self.kept.clear()  # the warm-up round's checks are not counted either

    def check(self, what: str, ok: bool) -> None:
        self.kept.setdefault(what, []).append(ok)

    async def bare_two(self) -> dict[str, float]:
        return {"bare2": await asyncio.to_thread(bare_two_turns, self.url, PROMPT)}

    async def bare_one(self) -> dict[str, float]:
        return {"bare1": await asyncio.to_thread(bare_cli_turn, self.url, PROMPT)}

    async def two_turn(self, name: str) -> dict[str, float]:
        """Two turns of a new session (the check of the parked pid between them is not timed)."""
        engine = self.engines[name]
        session = engine.start_session()
        first = await timed_turns(session, self.secrets)
        parked = _kept(engine, session.session_id)
        second = await timed_turns(session, self.secrets, AGAIN)
        if name == "warm":
            self.check(
                "warm: second turn on the parked process",
                parked is not None and _kept(engine, session.session_id) == parked,
            )
        await _close(engine, session)
        return {f"{name}2": first + second, f"{name}_second": second}

    async def pooled(self) -> dict[str, float]:
        engine = self.engines["pooled"]
        sid, pid = await _settled_pool(engine)
        start = time.perf_counter()
        session = engine.start_session()
        took = time.perf_counter() - start + await timed_turns(session, self.secrets)
        self.check(
            "pooled: first turn on the pooled process",
            session.session_id == sid and _kept(engine, sid) == pid,
        )
        await _close(engine, session)
        await _settled_pool(engine)  # the refill settles before the next variant's clock
        return {"pooled1": took}

    async def no_pool(self) -> dict[str, float]:
        engine = self.engines["warm"]
        start = time.perf_counter()
        session = engine.start_session()
        took = time.perf_counter() - start + await timed_turns(session, self.secrets)
        await _close(engine, session)
        return {"fresh1": took}

    async def served_turns(self) -> dict[str, float]:
        return await self.served.turns(self)


class Served:
    """A ``harness-run serve --warm-pool 1`` process and a client of it."""

    def __init__(self, proc: Any, client: Any) -> None:
        self.proc = proc
        self.client = client

    async def settled(self) -> int:
        """Wait until the server keeps exactly one ``claude`` (its pooled one), started ``SETTLE_S``
        ago; its pid."""
        deadline = time.monotonic() + 60
        pids: set[int] = set()
        while time.monotonic() < deadline:
            pids = claude_processes(self.proc.pid)
            if len(pids) == 1 and _age_s(pid := next(iter(pids))) >= SETTLE_S:
                return pid
            await asyncio.sleep(0.05)
        raise SystemExit(f"the server's warm pool did not settle: claude processes {sorted(pids)}")

    async def turns(self, rounds: Rounds) -> dict[str, float]:
        pooled = await self.settled()
        start = time.perf_counter()
        session = self.client.start_session()
        first = time.perf_counter() - start + await timed_turns(session, rounds.secrets)
        after_first = _of_session(claude_processes(self.proc.pid), session.session_id)
        second = await timed_turns(session, rounds.secrets, AGAIN)
        after_second = _of_session(claude_processes(self.proc.pid), session.session_id)
        # the session's id is the pooled process's, and no other process ran a turn of it; then
        # the process that ran the first turn ran the second
        rounds.check("served: first turn on the pooled process", after_first == {pooled})
        rounds.check(
            "served: second turn on the parked process", len(after_first) == 1 and after_second == after_first
        )
        await asyncio.to_thread(self.client.delete_session, session.session_id)
        await self.settled()
        return {"served1": first, "served2": second}


# --- the load -------------------------------------------------------------------------------------


async def load(url: str, sessions: int) -> list[tuple[str, str, str, bool | None]]:
    """``sessions`` sessions x 2 turns at once on one engine with the defaults; the table's rows."""
    engine = local_engine()
    secrets = model_secrets(url)
    peak = {"claude": 0, "mb": 0.0}
    done = asyncio.Event()

    async def sample() -> None:
        while not done.is_set():
            pids = claude_processes(os.getpid())
            peak["claude"] = max(peak["claude"], len(pids))
            peak["mb"] = max(peak["mb"], rss_mb(pids))
            await asyncio.sleep(0.5)

    async def one() -> tuple[float, str | None]:
        start = time.perf_counter()
        try:
            session = engine.start_session()
            results = [await session.run(PROMPT, secrets=secrets), await session.run(AGAIN, secrets=secrets)]
        except Exception as exc:
            return time.perf_counter() - start, f"{type(exc).__name__}: {exc}"
        error = next((f"{r.stop_reason}: {r.error}" for r in results if r.is_error), None)
        return time.perf_counter() - start, error

    sampler = asyncio.create_task(sample())
    start = time.perf_counter()
    try:
        outcomes = await asyncio.gather(*(one() for _ in range(sessions)))
        wall = time.perf_counter() - start
        kept = engine.warm_processes()
    finally:
        done.set()
        await sampler
        await engine.aclose()
    failures = [error for _, error in outcomes if error is not None]
    each = [took for took, _ in outcomes]
    memory = sum(w.memory_mb for w in kept)
    print(f"load: {sessions} sessions x 2 turns at once, one engine (max_idle_processes={MAX_IDLE})")
    print(
        f"load: wall {wall:.2f} s, per session p50 {percentile(each, 0.5):.2f} s  p95 {percentile(each, 0.95):.2f} s  max {max(each):.2f} s"
    )
    print(f"load: failures {len(failures)} of {sessions}")
    for error in sorted(set(failures))[:3]:
        print(f"load:   {error[:300]}")
    print(f"load: peak claude processes {peak['claude']}, peak their RSS {peak['mb']:.0f} MB")
    print(
        f"load: kept after: {len(kept)} processes ({', '.join(sorted({w.state for w in kept})) or 'none'}), "
        f"memory {memory:.0f} MB ({', '.join(f'{w.memory_mb:.0f}' for w in kept)})"
    )
    return [
        ("load: failed sessions", f"{len(failures)}/{sessions}", "0", not failures),
        ("load: processes kept after", str(len(kept)), f"<= {MAX_IDLE}", len(kept) <= MAX_IDLE),
        (
            "load: their memory (sum of memory_mb)",
            f"{memory:.0f} MB",
            f"{MAX_IDLE} processes' worth",
            len(kept) <= MAX_IDLE,
        ),
    ]


# --- the run --------------------------------------------------------------------------------------


async def measure(url: str, rounds: int, server_url: str, key: str, server: Any) -> Rounds:
    import harness_run

    engines = {
        "warm": local_engine(),
        "cold": local_engine(idle_ttl=0),
        "pooled": local_engine(warm_pool=1),
    }
    client = harness_run.connect(server_url, api_key=key)
    series = Rounds(url, engines, Served(server, client))
    try:
        await series.run(rounds)
    finally:
        await client.aclose()
        for engine in engines.values():
            await engine.aclose()
    return series


def print_rounds(series: Rounds, rounds: int) -> list[tuple[str, str, str, bool | None]]:
    times = series.times
    print(f"rounds: {rounds} (after one warm-up), alternating")
    labels = {
        "bare2": "bare claude -p + --resume",
        "warm2": "harness-run two-turn session, warm (defaults)",
        "warm_second": "harness-run second turn, on the parked process",
        "cold2": "harness-run two-turn session, idle_ttl=0",
        "bare1": "bare claude -p turn",
        "pooled1": "harness-run first turn, warm_pool=1",
        "fresh1": "harness-run first turn, no pool",
        "served1": "served first turn (pooled session)",
        "served2": "served second turn (parked process)",
    }
    for key, label in labels.items():
        report(label, times[key])
    rows: list[tuple[str, str, str, bool | None]] = []

    def line(label: str, ours: str, base: str, target: float | None) -> None:
        aim = f"<= {target}" if target is not None else ""
        value = ratio(f"ratio {label}", times[ours], times[base], aim)
        rows.append((label, f"{value:.3f}", aim or "(contrast)", None if target is None else value <= target))

    line("two-turn warm / bare", "warm2", "bare2", TARGETS["two-turn"])
    line("two-turn idle_ttl=0 / bare", "cold2", "bare2", None)
    line("first turn warm_pool=1 / bare turn", "pooled1", "bare1", TARGETS["pooled"])
    line("first turn no pool / bare turn", "fresh1", "bare1", None)
    line("served first turn (pooled) / bare turn", "served1", "bare1", TARGETS["served"])
    line("served second turn (parked) / bare turn", "served2", "bare1", TARGETS["served"])
    for what, checks in series.kept.items():
        print(f"check, {what}: {sum(checks)}/{len(checks)}")
        rows.append(
            (
                f"check, {what}",
                f"{sum(checks)}/{len(checks)}",
                "all",
                all(checks),
            )
        )
    return rows


def print_table(rows: list[tuple[str, str, str, bool | None]]) -> None:
    width = max(len(r[0]) for r in rows)
    print(f"\n{'metric':<{width}}  {'value':>10}  {'target':<22}  met?")
    for metric, value, target, met in rows:
        print(
            f"{metric:<{width}}  {value:>10}  {target:<22}  {'-' if met is None else 'yes' if met else 'NO'}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks warm_turns", description=(__doc__ or "").splitlines()[0]
    )
    parser.add_argument("--rounds", type=int, default=7, help="measured rounds (0: only --load)")
    parser.add_argument("--load", action="store_true", help="also 64 sessions x 2 turns at once (heavy)")
    parser.add_argument("--load-sessions", type=int, default=64, metavar="N")
    parser.add_argument(
        "--no-env-key",
        action="store_true",
        help="the model's endpoint and key only in each turn's secrets, not in the engines' environment",
    )
    args = parser.parse_args()
    compile_package()
    print(f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    rows: list[tuple[str, str, str, bool | None]] = []
    with scripted_model() as url:
        for name in [k for k in os.environ if k.startswith("ANTHROPIC_")]:
            del os.environ[name]
        if not args.no_env_key:  # as a user has them exported (each turn passes them too)
            os.environ.update(model_secrets(url))
        print(f"model endpoint and key in the engines' environment: {'no' if args.no_env_key else 'yes'}")
        if args.rounds > 0:
            store = scratch("server-store-")
            spec_file = store / "agent.yaml"
            spec_file.write_text(claude_spec().to_yaml())
            key = make_key(store)
            server, server_url, _ = start_server(store, spec_file, "--warm-pool", "1", env=dict(os.environ))
            try:
                series = asyncio.run(measure(url, args.rounds, server_url, key, server))
            finally:
                stop_server(server)
            rows += print_rounds(series, args.rounds)
        if args.load:
            rows += asyncio.run(load(url, args.load_sessions))
    print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    if rows:
        print_table(rows)


if __name__ == "__main__":
    main()
