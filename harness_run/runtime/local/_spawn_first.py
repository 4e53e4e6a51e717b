"""Spawn first, the engine's side: adopt a harness process ``harness-run run`` started from the
launch-plan cache before the spec was validated, or stop it; write the cache from validated plans.

A fresh ``harness-run run`` looks up the workdir's launch-plan cache (``harness_run._launch``) for
its spec file, flags and library before it imports pydantic; on a hit it spawns the harness at once
(``cli/_prespawn.py``) and hands the process to the engine with a :class:`SpawnFirst`. The turn then
runs as always — spec validated, engine and session stored, turn reserved, workspace and environment
prepared, launch plan computed by the driver — and :meth:`SpawnFirst.launch` compares that plan with
the one the process was started with. Equal (but for the model proxy's turn tokens, which the proxy
takes over): the turn adopts the process and the proxy starts serving on the socket the process
already talks to. Different (the environment, the binary or the library changed): the process is
stopped before any of its requests was served, and the turn launches normally.

Nothing reaches the model before that comparison: the proxy does not serve the socket until the
process is adopted, so a stopped process's requests are never forwarded (its token is unknown to
the proxy). A turn that launched normally writes the cache entry for the next run when it can be
cached: the first turn of a new Claude Code session with nothing to prepare (no repositories,
skills, packages or setup script, a workspace of its own, no secret-bearing MCP server, no other
uid). Other harnesses take the normal path.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import json
import logging
import os
import socket
from pathlib import Path

from harness_run import _launch as launch_cache
from harness_run._launch import GUARD_SOCKET, GUARD_TOKEN, PROMPT, PROXY, SESSION, LaunchEntry
from harness_run.harness import GUARD_SOCKET_ENV, HarnessDriver, LaunchPlan, TurnContext
from harness_run.runtime._process import Spawned, kill_tree, release_reaper
from harness_run.security import TurnCredentials

__all__ = ["SpawnFirst", "warm_up"]

_log = logging.getLogger("harness_run.runtime")
_SENTINEL = 'hr-prompt-\u00e9"\n'
"""A prompt that tells JSON-escaped (``\\u00e9\\"\\n``) from raw text."""


@functools.cache
def warm_up() -> None:
    """Build the pydantic schemas used after a turn while the first CLI boots (~0.5 s; once)."""
    from harness_run import events
    from harness_run.store import SessionRecord, TurnRecord

    for model in (
        events.RunResult,
        events.ResultEvent,
        events.MessageEvent,
        events.StartedEvent,
        events.ToolUseEvent,
        events.ToolResultEvent,
        events.UserEvent,
        SessionRecord,
        TurnRecord,
    ):
        model.model_rebuild(force=True)


class SpawnFirst:
    """What ``harness-run run`` hands the local engine for the session it starts next (see the
    module docstring): the session's id, the cache entry's file, and the process spawned from that
    entry with the proxy socket and turn tokens it was given (none on a miss)."""

    def __init__(
        self,
        session_id: str,
        cache_file: Path,
        spawned: Spawned | None = None,
        proxy_socket: socket.socket | None = None,
        tokens: tuple[str, ...] = (),
        guard: tuple[str, str] | None = None,
    ) -> None:
        """``guard``: the guard server's socket path and token the spawned process was given."""
        self.session_id = session_id
        self.cache_file = cache_file
        self._spawned = spawned
        self._socket = proxy_socket
        self._tokens = tokens
        self._guard = guard
        self._used = False
        self.claimed = False
        """The engine took the spawned process over (adopted it, or stopped it)."""
        self.adopted = False
        """The turn runs in the spawned process."""

    def spawned(self, session_id: str) -> bool:
        """A harness process for the session's first turn is running (not adopted or stopped yet):
        the native session files it is writing are this turn's, not a previous turn's."""
        return session_id == self.session_id and self._spawned is not None

    def proxy_socket(self, session_id: str) -> socket.socket | None:
        """For the session's first turn: the socket the spawned harness was pointed at, for the
        turn's model proxy (given once; the proxy closes it)."""
        if session_id != self.session_id or self._spawned is None:
            return None
        sock, self._socket = self._socket, None
        return sock

    async def launch(
        self,
        driver: HarnessDriver,
        ctx: TurnContext,
        plan: LaunchPlan,
        creds: TurnCredentials,
        forms: list[str],
        *,
        cacheable: bool,
    ) -> Spawned | None:
        """The spawned process when ``plan`` (the turn's, from the validated spec) is what it was
        started with — the proxy then serves it — else None (it is stopped); a plan not adopted is
        written to the cache when ``cacheable`` and nothing in it is secret (``forms``)."""
        if ctx.session_id != self.session_id or self._used:
            return None
        self._used = True
        spawned, self._spawned = self._spawned, None
        if spawned is not None:
            self.claimed = True
            differs = self._differs(spawned, ctx, plan, creds)
            if not differs:
                self.adopted = True
                await creds.guard.start()  # before the proxy: no tool call may find it missing
                if creds.proxy is not None:
                    await creds.proxy.start()  # first of all: the harness is waiting for it
                return spawned
            _log.info("spawn first: the cached launch plan is out of date (%s); launching anew", differs)
            await kill_tree(spawned.process, grace=0.5, tag=spawned.tag)
            await release_reaper(spawned.reaper)
            for path in driver.native_files(ctx):  # its transcript of this new session: start anew
                path.unlink(missing_ok=True)
        if cacheable and ctx.spec.harness == "claude-code" and _nothing_to_prepare(ctx):
            entry = _entry(driver, ctx, plan, creds, forms)
            if entry is not None:
                try:
                    await asyncio.to_thread(launch_cache.store, self.cache_file, entry)
                except OSError as exc:  # a read-only or full workdir: no cache, no failure
                    _log.info("spawn first: cannot write %s: %s", self.cache_file, exc)
        return None

    def _differs(self, spawned: Spawned, ctx: TurnContext, plan: LaunchPlan, creds: TurnCredentials) -> str:
        """What of ``plan`` differs from ``spawned.plan`` once the proxy's new turn tokens are the
        spawned ones ("" when nothing does: the proxy's routes then answer to those tokens)."""
        ours = creds.proxy.tokens if creds.proxy is not None else []
        if len(ours) != len(self._tokens):
            return "the model proxy's routes"
        rename = dict(zip(ours, self._tokens, strict=True))
        guarded = GUARD_SOCKET_ENV in plan.env
        if guarded != (self._guard is not None):
            return "the guard server"
        if guarded and self._guard is not None:
            rename[creds.guard.socket_path], rename[creds.guard.token] = self._guard

        def sub(text: str) -> str:
            for new, old in rename.items():
                text = text.replace(new, old)
            return text

        given = spawned.plan
        checks = {
            "argv": [sub(a) for a in plan.argv] == given.argv,
            "environment": {k: sub(v) for k, v in plan.env.items()} == given.env,
            "stdin": sub((plan.stdin or b"").decode()) == (given.stdin or b"").decode(),
            "config files": {path: sub(text) for path, text in plan.files.items()} == given.files,
            "stdin mode": plan.keep_stdin_open == given.keep_stdin_open,
            "working directory": spawned.cwd == ctx.workspace,
        }
        differs = ", ".join(name for name, same in checks.items() if not same)
        if not differs and creds.proxy is not None:
            creds.proxy.rekey({new: old for new, old in rename.items() if new in ours})
        if not differs and self._guard is not None:
            creds.guard.adopt(*self._guard)
        return differs


def _nothing_to_prepare(ctx: TurnContext) -> bool:
    """A first turn whose workspace is just made: the entry's directories are all it needs."""
    spec = ctx.spec
    return (
        not ctx.resume
        and not spec.repos
        and not spec.skills
        and not spec.packages
        and not spec.setup_script
        and not any(server.secret_names() for server in spec.mcp_servers)
        and ctx.workspace == ctx.home.parent / "workspace"  # its own (not shared, not a host dir)
    )


def _entry(
    driver: HarnessDriver, ctx: TurnContext, plan: LaunchPlan, creds: TurnCredentials, forms: list[str]
) -> LaunchEntry | None:
    """The cache entry for ``plan``, or None when the plan cannot be one: a per-run value not
    replaced by its placeholder, a secret in a template, or an entry that does not give it back."""
    root = ctx.home.parent
    values = {SESSION: ctx.session_id}
    tokens = creds.proxy.tokens if creds.proxy is not None else []
    values.update({launch_cache.token(i): t for i, t in enumerate(tokens)})
    guard = GUARD_SOCKET_ENV in plan.env
    if guard:  # the spawned process gets a socket and token of its own; the broker adopts them
        values[GUARD_SOCKET], values[GUARD_TOKEN] = creds.guard.socket_path, creds.guard.token
    proxy = creds.proxy is not None and creds.proxy.metering
    if proxy:
        assert creds.proxy is not None
        values[PROXY] = f"http://127.0.0.1:{creds.proxy.port}"
    probe = (driver.launch(dataclasses.replace(ctx, prompt=_SENTINEL)).stdin or b"").decode()
    escaped = json.dumps(_SENTINEL)[1:-1]
    kind = "json" if escaped in probe else "raw" if _SENTINEL in probe else None
    if kind is None:
        return None
    names = tuple(k for k, v in plan.env.items() if os.environ.get(k) == v)
    entry = LaunchEntry(
        argv=tuple(launch_cache.templatize(a, values) for a in plan.argv),
        env={k: launch_cache.templatize(v, values) for k, v in plan.env.items() if k not in names},
        env_names=names,
        stdin=launch_cache.templatize(probe, {**values, PROMPT: escaped if kind == "json" else _SENTINEL}),
        prompt=kind,
        keep_stdin_open=plan.keep_stdin_open,
        files={
            launch_cache.templatize(str(p), values): launch_cache.templatize(t, values)
            for p, t in plan.files.items()
        },
        cwd=launch_cache.templatize(str(ctx.workspace), values),
        dirs=tuple(
            launch_cache.templatize(str(d), values) for d in (root.parent, root, ctx.workspace, ctx.home)
        ),
        tokens=len(tokens),
        proxy=proxy,
        preload=type(creds.proxy).SERVER_MODULES if proxy and creds.proxy is not None else (),
        guard=guard,
    )
    literals = [*entry.argv, *entry.env.values(), entry.stdin, entry.cwd, *entry.dirs]
    literals += [*entry.files, *entry.files.values()]
    banned = [*forms, *(v for k, v in values.items() if k != PROXY)]
    if proxy:
        banned.append(f"127.0.0.1:{values[PROXY].rsplit(':', 1)[1]}")
    if any(b and b in text for text in literals for b in banned):
        return None
    again = entry.resolve({**values, PROMPT: entry.prompt_value(ctx.prompt)}, os.environ)
    same = again is not None and (
        again.argv == plan.argv
        and again.env == plan.env
        and again.stdin == (plan.stdin or b"")
        and again.files == {str(p): t for p, t in plan.files.items()}
        and again.cwd == str(ctx.workspace)
    )
    return entry if same else None
