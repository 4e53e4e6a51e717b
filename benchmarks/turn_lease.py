"""What exclusive turns cost per turn, and how fast a dead client's turn is cleaned up.

    python -m benchmarks turn_lease [--rounds 50]

- reserve + renew + read a turn lease on the local SQLite store (per turn: one reserve, one renew
  every 2 s, one read when a session is re-attached or sent to);
- starting and releasing the reaper that ends a turn's processes if the client dies (per turn,
  overlapped with the CLI's own start-up);
- the end-of-turn scan for processes carrying the turn's tag (a /proc scan, per turn);
- from SIGKILL of a client to the last process of its turn gone (a stand-in turn: ``bash``
  running two ``sleep`` tool commands, one in a process group of its own).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import statistics
import subprocess
import sys
import time
import uuid
from pathlib import Path

from benchmarks._common import scratch

CLIENT = """
import asyncio, sys
from harness_run.runtime._process import start_reaper
async def main():
    proc = await asyncio.create_subprocess_exec(
        "bash", "-c", "sleep 300 & setsid sleep 301 & wait", env={"HARNESS_RUN_TURN": sys.argv[1]},
        start_new_session=True)
    await start_reaper(proc.pid, "HARNESS_RUN_TURN=" + sys.argv[1])
    print("ready", flush=True)
    await asyncio.sleep(600)
asyncio.run(main())
"""


def ms(values: list[float]) -> str:
    return f"median {statistics.median(values) * 1000:.2f} ms, max {max(values) * 1000:.2f} ms"


def lease_ops(rounds: int) -> None:
    from harness_run.store import SqliteStore

    store = SqliteStore(scratch("hr-bench-lease-"))
    reserve: list[float] = []
    renew: list[float] = []
    read: list[float] = []
    for turn in range(1, rounds + 1):
        t0 = time.perf_counter()
        store.reserve_turn("s", turn, "h")
        t1 = time.perf_counter()
        store.renew_turn("s", turn, "h")
        t2 = time.perf_counter()
        store.get_turn_lease("s", turn)
        t3 = time.perf_counter()
        reserve.append(t1 - t0)
        renew.append(t2 - t1)
        read.append(t3 - t2)
    store.close()
    print(f"reserve_turn     {ms(reserve)}")
    print(f"renew_turn       {ms(renew)}")
    print(f"get_turn_lease   {ms(read)}")


async def reaper_cost(rounds: int) -> None:
    from harness_run.runtime._process import descendants, release_reaper, start_reaper

    spawn: list[float] = []
    release: list[float] = []
    scan: list[float] = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        reaper = await start_reaper(os.getpid(), f"HARNESS_RUN_TURN={uuid.uuid4().hex}")
        t1 = time.perf_counter()
        await asyncio.sleep(0.3)  # a turn runs for a while: the reaper is up and waiting
        t1b = time.perf_counter()
        await release_reaper(reaper)
        t2 = time.perf_counter()
        descendants(os.getpid(), f"HARNESS_RUN_TURN={uuid.uuid4().hex}")
        scan.append(time.perf_counter() - t2)
        spawn.append(t1 - t0)
        release.append(t2 - t1b)
    print(f"reaper start     {ms(spawn)}")
    print(f"reaper release   {ms(release)} (at the end of a turn; waits for it to exit)")
    print(f"tag scan (/proc) {ms(scan)} over {len(os.listdir('/proc'))} /proc entries")


def tagged(tag: str) -> list[int]:
    found: list[int] = []
    for entry in os.listdir("/proc"):
        try:
            if (
                entry.isdigit()
                and f"\0{tag}\0".encode() in b"\0" + Path(f"/proc/{entry}/environ").read_bytes()
            ):
                stat = Path(f"/proc/{entry}/stat").read_bytes()
                if b") Z " not in stat:
                    found.append(int(entry))
        except OSError:
            continue
    return found


def kill_to_clean(rounds: int) -> None:
    waits: list[float] = []
    for _ in range(rounds):
        tag = uuid.uuid4().hex
        client = subprocess.Popen([sys.executable, "-c", CLIENT, tag], stdout=subprocess.PIPE, text=True)
        assert client.stdout is not None
        assert client.stdout.readline().strip() == "ready"
        while len(tagged(f"HARNESS_RUN_TURN={tag}")) < 3:
            time.sleep(0.01)
        t0 = time.perf_counter()
        client.send_signal(signal.SIGKILL)
        client.wait()
        client.stdout.close()
        while tagged(f"HARNESS_RUN_TURN={tag}"):
            time.sleep(0.005)
        waits.append(time.perf_counter() - t0)
    print(f"SIGKILL of the client -> its turn's processes gone: {ms(waits)} ({rounds} rounds)")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=50)
    args = parser.parse_args()
    lease_ops(args.rounds)
    asyncio.run(reaper_cost(min(args.rounds, 20)))
    kill_to_clean(min(args.rounds, 5))


if __name__ == "__main__":
    main()
