"""A separate client process for the GCS race tests (run as a script, not collected).

    python race_proc.py <store-url> <go-file> <holder> <turns> <bumps>

Connects, prints a "ready" line, waits for <go-file> to exist (so that every process starts
together), then tries to reserve turns 1..<turns> of session s1 (odd holders from the top down), then makes <bumps> read-modify-
write updates of the session record (turns + 1). Prints one JSON line with what it did.
"""

from __future__ import annotations

import json
import os
import sys
import time

from harness_run.errors import SessionBusyError
from harness_run.store import SessionRecord, open_store


def bump(record: SessionRecord) -> SessionRecord:
    return record.model_copy(update={"turns": record.turns + 1})


def main() -> None:
    url, go_file, holder, turns, bumps = sys.argv[1:6]
    store = open_store(url)
    store.get_session("warm-up")  # connect before the start line
    print(json.dumps({"ready": holder}), flush=True)
    while not os.path.exists(go_file):
        time.sleep(0.002)
    won: list[int] = []
    order = list(range(1, int(turns) + 1))
    if holder.endswith(("1", "3", "5", "7", "9")):
        order.reverse()  # the processes meet in the middle, where they collide for real
    for turn in order:
        try:
            store.reserve_turn("s1", turn, holder)
            won.append(turn)
        except SessionBusyError:
            pass
    for _ in range(int(bumps)):
        store.update_session("s1", bump)
    print(json.dumps({"won": won, "bumped": int(bumps)}), flush=True)
    store.close()


if __name__ == "__main__":
    main()
