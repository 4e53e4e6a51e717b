"""Redacting a harness's own files in place (a live session home between turns): every secret form
blanked, the harness still able to read and resume from them, owner-only modes."""

from __future__ import annotations

import json
import logging
import os
import re
import stat
from collections.abc import Sequence
from pathlib import Path

from harness_run.harness import SQLITE_MAGIC, scrub_sqlite
from harness_run.security._secrets import SHORT_SECRET, _redact_value  # pyright: ignore[reportPrivateUsage]

__all__ = ["redact_tree"]

_log = logging.getLogger("harness_run.security")

_WORD = rb"[A-Za-z0-9_]"


def redact_tree(root: Path, forms: Sequence[str]) -> list[Path]:
    """Blank every form (see ``secret_forms``) in every file under ``root``, in place, and make the
    tree the owner's only (directories 0700, files 0600, or 0700 when executable). Returns the files
    that still hold a form (could not be rewritten), for the caller to name.

    Text is masked with as many ``*`` as the form has bytes, so a file's length and every offset into
    it stay valid (Codex indexes its rollouts by byte offset); a JSON or JSON Lines file that the
    masking would make invalid (a form that is also JSON syntax) has the affected document
    re-serialized with its string values redacted instead. SQLite databases are scrubbed in SQL.
    Short forms (under ``SHORT_SECRET``) are blanked only as whole tokens, as in events. Symlinks
    are not followed. Call it only between turns (no harness process writing)."""
    if not root.is_dir():
        return []
    patterns = _patterns(forms)
    failed: list[Path] = []
    for dirpath, dirnames, filenames in os.walk(root):
        _owner_only(Path(dirpath), directory=True)
        for name in dirnames:
            _owner_only(Path(dirpath) / name, directory=True)
        names = set(filenames)
        for name in filenames:
            path = Path(dirpath) / name
            if path.is_symlink() or not path.is_file():
                continue
            _owner_only(path, directory=False)
            if patterns and not _redact_file(path, forms, patterns, names):
                failed.append(path)
    if failed:
        _log.warning("a secret value is left in %s (could not be rewritten)", ", ".join(map(str, failed)))
    return failed


def _patterns(forms: Sequence[str]) -> list[tuple[bytes, re.Pattern[bytes] | None]]:
    out: list[tuple[bytes, re.Pattern[bytes] | None]] = []
    for form in forms:
        raw = form.encode()
        short = len(form) < SHORT_SECRET
        out.append(
            (
                raw,
                # the literal first (re's fast literal scan; a leading look-behind would try every
                # byte: ~7 ms over a 200 KB transcript), then "no word byte before it"
                re.compile(re.escape(raw) + rb"(?<!" + _WORD + re.escape(raw) + rb")(?!" + _WORD + rb")")
                if short
                else None,
            )
        )
    return out


def _owner_only(path: Path, *, directory: bool) -> None:
    try:
        mode = stat.S_IMODE(path.lstat().st_mode)
        want = 0o700 if directory or mode & 0o100 else 0o600
        if mode != want:
            path.chmod(want)
    except OSError:
        pass


def _mask(data: bytes, patterns: Sequence[tuple[bytes, re.Pattern[bytes] | None]]) -> bytes:
    for raw, short in patterns:
        if raw not in data:
            continue
        if short is None:
            data = data.replace(raw, b"*" * len(raw))
        else:
            data = short.sub(lambda m: b"*" * len(m.group(0)), data)
    return data


def _holds(data: bytes, patterns: Sequence[tuple[bytes, re.Pattern[bytes] | None]]) -> bool:
    return any((raw in data) if short is None else bool(short.search(data)) for raw, short in patterns)


def _redact_file(
    path: Path,
    forms: Sequence[str],
    patterns: Sequence[tuple[bytes, re.Pattern[bytes] | None]],
    siblings: set[str],
) -> bool:
    """True when ``path`` holds no form afterwards."""
    try:
        with path.open("rb") as handle:
            head = handle.read(len(SQLITE_MAGIC))
            if head == SQLITE_MAGIC:
                return scrub_sqlite(path, forms)
            data = head + handle.read()
    except OSError:
        return False
    if path.name.endswith(("-wal", "-shm")) and path.name[:-4] in siblings:
        return True  # its database's scrub folds it in (checked there)
    if not _holds(data, patterns):
        return True
    if path.suffix == ".jsonl":
        docs = [
            _mask_json(line, forms, patterns) if _holds(line, patterns) else (line, True)
            for line in data.split(b"\n")
        ]
        new, clean = b"\n".join(d for d, _ in docs), all(c for _, c in docs)
    elif path.suffix == ".json":
        new, clean = _mask_json(data, forms, patterns, indent=2)
    else:
        new = _mask(data, patterns)
        clean = not _holds(new, patterns)
    try:
        tmp = path.with_name(f".{path.name}.redact")
        tmp.write_bytes(new)
        os.chmod(tmp, stat.S_IMODE(path.stat().st_mode))
        os.replace(tmp, path)
    except OSError:
        return False
    return clean


def _mask_json(
    doc: bytes,
    forms: Sequence[str],
    patterns: Sequence[tuple[bytes, re.Pattern[bytes] | None]],
    indent: int | None = None,
) -> tuple[bytes, bool]:
    """``doc`` masked in place, or re-serialized with its values redacted when masking would make a
    valid JSON document invalid (what is left of a form then is JSON syntax: ``true``, a key);
    and whether it is clean."""
    masked = _mask(doc, patterns)
    try:
        value: object = json.loads(doc)
    except ValueError:
        return masked, not _holds(masked, patterns)  # not JSON to begin with: nothing to keep valid
    try:
        json.loads(masked)
    except ValueError:
        redacted = _redact_value(value, forms, numbers=False)
        separators = (",", ": ") if indent else (",", ":")
        text = json.dumps(redacted, ensure_ascii=False, indent=indent, separators=separators)
        return text.encode(), True
    return masked, not _holds(masked, patterns)
