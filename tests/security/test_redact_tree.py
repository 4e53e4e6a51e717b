"""``security.redact_tree``: a harness's files redacted in place — text masked at the same length,
JSON kept valid when a secret is also JSON syntax, SQLite scrubbed in SQL, owner-only modes."""

from __future__ import annotations

import json
import sqlite3
import stat
from pathlib import Path

from harness_run.security import redact_tree, secret_forms


def test_every_kind_of_file_is_redacted_in_place_and_stays_readable(tmp_path: Path) -> None:
    long_secret, word_secret = "tok-0123456789abcdef", "true"
    forms = secret_forms([long_secret, word_secret])
    root = tmp_path / "home"
    (root / "projects").mkdir(parents=True)
    lines = [
        json.dumps({"type": "tool_result", "content": f"the key is {long_secret}"}),
        json.dumps({"ok": True, "said": "true"}),  # the short secret is JSON syntax here
        json.dumps({"untouched": "line"}),
    ]
    transcript = root / "projects" / "t.jsonl"
    transcript.write_text("\n".join(lines) + "\n")
    log = root / "debug.log"
    log.write_text(f"env KEY={long_secret}; a true story; trueish\n")
    db = root / "state.sqlite"
    conn = sqlite3.connect(db)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("CREATE TABLE items (id INTEGER, body TEXT)")
    conn.execute("INSERT INTO items VALUES (1, ?)", (json.dumps({"output": long_secret * 300}),))
    conn.commit()
    conn.close()
    for path in (transcript, log, db):
        path.chmod(0o644)
    root.chmod(0o755)

    assert redact_tree(root, forms) == []

    out = transcript.read_text().splitlines()
    assert [json.loads(line) for line in out] == [
        {"type": "tool_result", "content": "the key is " + "*" * len(long_secret)},
        {"ok": True, "said": "***"},
        {"untouched": "line"},
    ]
    assert out[0] != lines[0] and len(out[0]) == len(lines[0])  # masked at the same length
    assert log.read_text() == f"env KEY={'*' * len(long_secret)}; a **** story; trueish\n"
    conn = sqlite3.connect(db)
    (body,) = conn.execute("SELECT body FROM items").fetchone()
    conn.close()
    assert json.loads(body)["output"] == "***" * 300
    for path in [root, *root.rglob("*")]:
        assert long_secret.encode() not in (path.read_bytes() if path.is_file() else b"")
        mode = stat.S_IMODE(path.stat().st_mode)
        assert mode == (0o700 if path.is_dir() else 0o600), (path, oct(mode))
