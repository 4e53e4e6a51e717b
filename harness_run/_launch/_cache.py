"""The launch-plan cache: where its entries live, their key, format and placeholders.

A fresh ``harness-run run`` reads an entry before it imports anything heavy (pydantic included)
and spawns the harness from it (``cli/_prespawn.py``); the local engine writes entries from the
launch plans it computed from a validated spec, and checks a process spawned from an entry against
the plan it computes itself before it adopts it (``runtime/local/_spawn_first.py``).

An entry is one first turn's launch plan (argv, environment, stdin, config files, working
directory) with placeholders ``\\0name\\0`` for what changes from run to run: the session id, the
prompt, the model proxy's address and its turn tokens, the guard server's socket and token. An
environment variable is either such a template or a *name* whose value is read from the environment
at spawn time, so an entry never holds a secret value (the writer refuses a plan whose templates
would). Anything unreadable is a miss.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Final, Literal, NamedTuple, cast

__all__ = [
    "FORMAT",
    "GUARD_SOCKET",
    "GUARD_TOKEN",
    "PROMPT",
    "PROXY",
    "SESSION",
    "LaunchEntry",
    "Resolved",
    "cache_key",
    "entry_path",
    "fill",
    "load",
    "mark",
    "store",
    "templatize",
    "token",
]

FORMAT: Final = 2
SESSION: Final = "session"
PROMPT: Final = "prompt"
PROXY: Final = "proxy"
"""``http://127.0.0.1:PORT``: the model proxy's origin."""
GUARD_SOCKET: Final = "guardsock"
"""The guard server's unix socket (in a 0700 directory of its own)."""
GUARD_TOKEN: Final = "guardtoken"
"""The guard server's per-turn token."""
_DIR: Final = "launch-cache"
_KEEP: Final = 64
"""Entries kept per workdir (the oldest go when a new one is written)."""


def token(index: int) -> str:
    """The placeholder name of the model proxy's ``index``-th turn token."""
    return f"token{index}"


def mark(name: str) -> str:
    """A placeholder as it appears in a template (NUL-delimited: no argv or variable holds a NUL)."""
    return f"\0{name}\0"


def cache_key(spec_file: Path, spec_bytes: bytes, flags: Sequence[str], *, version: str) -> str:
    """The entry for this spec file (path and content), these plan-changing flags and this library
    (its ``version`` and where it is)."""
    parts = [
        f"format={FORMAT}",
        f"version={version}",
        f"library={Path(__file__).resolve().parents[1]}",  # this harness_run package
        f"spec={spec_file}",
        f"sha256={hashlib.sha256(spec_bytes).hexdigest()}",
        *flags,
    ]
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:32]


def entry_path(workdir: Path, key: str) -> Path:
    return workdir / _DIR / f"{key}.json"


class LaunchEntry(NamedTuple):
    """One first turn's launch plan with placeholders (see the module docstring). (Named tuples, not
    dataclasses: ``dataclasses`` costs ~10 ms of imports before the spawn.)"""

    argv: tuple[str, ...]
    env: dict[str, str]
    """Variable -> template (no secret value)."""
    env_names: tuple[str, ...]
    """Variables whose values come from the environment at spawn time."""
    stdin: str
    prompt: Literal["json", "raw"]
    """How the prompt appears in ``stdin``: JSON-escaped (inside a JSON string) or as is."""
    keep_stdin_open: bool
    files: dict[str, str]
    """Path template -> text template: config files written before the spawn."""
    cwd: str
    dirs: tuple[str, ...]
    """Directories made (0700, in this order) before the spawn."""
    tokens: int
    """How many model-proxy turn tokens the plan holds."""
    proxy: bool
    """The plan points the harness at the model proxy (a socket is bound for it)."""
    preload: tuple[str, ...] = ()
    """Modules the turn imports later (the proxy's server), imported in a thread at the spawn."""
    guard: bool = False
    """The plan's hook asks the engine's guard server (a socket directory and token are made)."""

    def prompt_value(self, prompt: str) -> str:
        """What the ``prompt`` placeholder stands for: the prompt as it goes into ``stdin``."""
        return json.dumps(prompt)[1:-1] if self.prompt == "json" else prompt

    def resolve(self, values: Mapping[str, str], environ: Mapping[str, str]) -> Resolved | None:
        """The launch plan for these placeholder values, with ``env_names`` read from ``environ``;
        None when a placeholder has no value or a named variable is not set."""
        env: dict[str, str] = {}
        for name in self.env_names:
            if name not in environ:
                return None
            env[name] = environ[name]
        parts = [*self.argv, *self.env.values(), self.stdin, self.cwd, *self.dirs]
        for path, text in self.files.items():
            parts += [path, text]
        filled = [fill(part, values) for part in parts]
        if any(part is None for part in filled):
            return None
        done = cast(list[str], filled)
        argv, done = done[: len(self.argv)], done[len(self.argv) :]
        env.update(zip(self.env, done[: len(self.env)], strict=True))
        done = done[len(self.env) :]
        stdin, cwd, done = done[0], done[1], done[2:]
        dirs, done = done[: len(self.dirs)], done[len(self.dirs) :]
        files = dict(zip(done[::2], done[1::2], strict=True))
        return Resolved(argv, env, stdin.encode(), files, cwd, dirs)

    def to_json(self) -> dict[str, Any]:
        return {
            "format": FORMAT,
            "argv": list(self.argv),
            "env": self.env,
            "env_names": list(self.env_names),
            "stdin": self.stdin,
            "prompt": self.prompt,
            "keep_stdin_open": self.keep_stdin_open,
            "files": self.files,
            "cwd": self.cwd,
            "dirs": list(self.dirs),
            "tokens": self.tokens,
            "proxy": self.proxy,
            "preload": list(self.preload),
            "guard": self.guard,
        }

    @classmethod
    def from_json(cls, data: object) -> LaunchEntry | None:
        """The entry, or None for anything that is not exactly this format."""
        if not isinstance(data, dict):
            return None
        raw = cast(dict[str, object], data)
        argv, env, names, files, dirs = (raw.get(k) for k in ("argv", "env", "env_names", "files", "dirs"))
        stdin, prompt, cwd, tokens = (raw.get(k) for k in ("stdin", "prompt", "cwd", "tokens"))
        keep, proxy, preload = raw.get("keep_stdin_open"), raw.get("proxy"), raw.get("preload")
        guard = raw.get("guard")
        if (
            raw.get("format") != FORMAT
            or not _strs(argv)
            or not _str_map(env)
            or not _strs(names)
            or not _str_map(files)
            or not _strs(dirs)
            or not isinstance(stdin, str)
            or prompt not in ("json", "raw")
            or not isinstance(cwd, str)
            or not isinstance(tokens, int)
            or isinstance(tokens, bool)
            or not 0 <= tokens < 16
            or not isinstance(keep, bool)
            or not isinstance(proxy, bool)
            or not _strs(preload)
            or not isinstance(guard, bool)
        ):
            return None
        return cls(
            argv=tuple(cast(list[str], argv)),
            env=dict(cast(dict[str, str], env)),
            env_names=tuple(cast(list[str], names)),
            stdin=stdin,
            prompt=prompt,
            keep_stdin_open=keep,
            files=dict(cast(dict[str, str], files)),
            cwd=cwd,
            dirs=tuple(cast(list[str], dirs)),
            tokens=tokens,
            proxy=proxy,
            preload=tuple(cast(list[str], preload)),
            guard=guard,
        )


class Resolved(NamedTuple):
    """An entry with this run's values: a launch plan as the harness gets it (``env`` without the
    turn tag) and the directories to make first."""

    argv: list[str]
    env: dict[str, str]
    stdin: bytes
    files: dict[str, str]
    cwd: str
    dirs: list[str]


def _strs(value: object) -> bool:
    return isinstance(value, list) and all(isinstance(v, str) for v in cast(list[object], value))


def _str_map(value: object) -> bool:
    return isinstance(value, dict) and all(
        isinstance(k, str) and isinstance(v, str) for k, v in cast(dict[object, object], value).items()
    )


def load(path: Path) -> LaunchEntry | None:
    """The entry at ``path``; None when there is none or it cannot be read as one (a miss)."""
    try:
        with open(path, "rb") as handle:
            return LaunchEntry.from_json(json.loads(handle.read()))
    except (OSError, ValueError, RecursionError):
        return None


def store(path: Path, entry: LaunchEntry) -> None:
    """Write ``entry`` at ``path`` (0600, in a 0700 directory, replaced atomically); the oldest
    entries beyond the cache's size go."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        json.dump(entry.to_json(), handle, separators=(",", ":"))
    os.replace(tmp, path)
    entries = sorted(path.parent.glob("*.json"), key=lambda p: p.stat().st_mtime_ns if p.exists() else 0)
    for old in entries[:-_KEEP]:
        old.unlink(missing_ok=True)


def templatize(text: str, values: Mapping[str, str]) -> str:
    """``text`` with each value of ``values`` (placeholder name -> the value this run had) replaced
    by its placeholder, longest first."""
    for name, value in sorted(values.items(), key=lambda item: -len(item[1])):
        if value:
            text = text.replace(value, mark(name))
    return text


def fill(template: str, values: Mapping[str, str]) -> str | None:
    """``template`` with its placeholders replaced in one pass; None if it names an unknown one."""
    parts = template.split("\0")
    if len(parts) % 2 == 0:  # an unpaired NUL: not a template this module wrote
        return None
    for i in range(1, len(parts), 2):
        found = values.get(parts[i])
        if found is None:
            return None
        parts[i] = found
    return "".join(parts)
