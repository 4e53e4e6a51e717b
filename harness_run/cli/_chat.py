"""``harness-run chat [SPEC | --session ID | --server URL]``: an interactive shell over a session.

Answers stream as they arrive (``delta`` events), tool calls are folded to one line, slash commands
manage sessions. Ctrl-C interrupts the running turn; a second Ctrl-C within 2 s, or one at the idle
prompt, quits. On a terminal prompt_toolkit edits the line and keeps a history of earlier prompts
(``<workdir>/chat_history``, 0600); from a pipe, lines are read one by one (scripts, tests).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from harness_run.cli._options import add_workdir, secrets_from_env
from harness_run.errors import HarnessRunError, SessionNotFoundError, UsageError

if TYPE_CHECKING:
    from collections.abc import Awaitable

    from harness_run.cli._chat_io import ChatView, Lines
    from harness_run.events import ApprovalRequestEvent, QuestionEvent
    from harness_run.runtime import Engine, Run, Session

__all__ = ["register"]

_QUIT_WINDOW = 2.0
"""A second Ctrl-C within this many seconds of the first quits instead of interrupting again."""

HELP = [
    ("/new", "start a new session of the same engine"),
    ("/sessions", "list the engine's sessions (* marks this one)"),
    ("/resume ID", "continue another session (an id, or a unique start of one)"),
    ("/interrupt", "stop the running turn (also Ctrl-C; works while a turn runs)"),
    ("/exec CMD", "run a shell command in the session's workspace"),
    ("/cost", "this session's turns, tokens and cost"),
    ("/help", "this list"),
    ("/quit", "leave (also Ctrl-D; Ctrl-C twice while a turn runs, once at the prompt)"),
]


def register(sub: Any) -> None:
    chat = sub.add_parser(
        "chat",
        help="an interactive shell: streamed answers, slash commands, Ctrl-C interrupts",
        description="Chat with an agent: SPEC (a spec file, run on this machine), --session ID (a "
        "stored local session) or --server URL (a `harness-run serve`). Secrets are read from this "
        "process's environment by name (--secret NAME). Type /help inside for the commands.",
    )
    chat.add_argument("spec", nargs="?", help="spec file (YAML or JSON) to run locally")
    chat.add_argument("--session", metavar="ID", help="continue this session")
    chat.add_argument("--server", metavar="URL", help="a harness-run serve to talk to")
    chat.add_argument("--api-key", metavar="KEY", help="the server's API key (default: $HARNESS_RUN_API_KEY)")
    chat.add_argument("--engine", metavar="NAME", help="which engine of the server (when it serves several)")
    chat.add_argument(
        "--secret",
        action="append",
        default=[],
        metavar="NAME",
        help="pass the environment variable NAME as a secret with every turn (repeatable)",
    )
    add_workdir(chat)
    chat.set_defaults(func=_chat)


def _chat(args: argparse.Namespace) -> int:
    if args.server and args.spec:
        raise UsageError("give either a SPEC file or --server URL, not both")
    if not (args.server or args.spec or args.session):
        raise UsageError("give a SPEC file, --session ID or --server URL (see `harness-run chat --help`)")
    if (args.api_key or args.engine) and not args.server:
        raise UsageError("--api-key and --engine go with --server URL")
    if args.spec and not Path(args.spec).is_file():
        raise UsageError(f"spec file {args.spec!r} not found; give the path of a YAML or JSON spec")
    secrets = secrets_from_env(args.secret)
    return asyncio.run(_main(args, secrets))


def _workdir(args: argparse.Namespace) -> Path:
    from harness_run.runtime.local import default_workdir, resolve_workdir

    return resolve_workdir(args.workdir if args.workdir is not None else default_workdir())


def _open_engine(args: argparse.Namespace) -> Engine:
    if args.server:
        from harness_run.runtime.server_client import connect

        return connect(args.server, api_key=args.api_key, engine=args.engine)
    if args.spec:
        from harness_run import local
        from harness_run.spec import AgentSpec

        return local.deploy(AgentSpec.from_yaml(Path(args.spec)), workdir=args.workdir)
    from harness_run import local
    from harness_run.store import SqliteStore

    root = _workdir(args)
    store = SqliteStore(root)
    try:
        record = store.get_session(args.session)
    finally:
        store.close()
    if record is None:
        raise SessionNotFoundError(
            f"no session {args.session!r} in {root}; list them with `harness-run sessions`"
        )
    return local.get_engine(record.engine, workdir=root)


async def _main(args: argparse.Namespace, secrets: dict[str, str]) -> int:
    from harness_run.cli._chat_io import ChatView, PipeLines, TerminalLines, open_history

    engine = _open_engine(args)
    try:
        session = engine.get_session(args.session) if args.session else engine.start_session()
        view = ChatView()
        tty = sys.stdin.isatty() and sys.stdout.isatty()
        lines: Lines = TerminalLines(open_history(_workdir(args) / "chat_history")) if tty else PipeLines()
        chat = Chat(engine, session, view, lines, secrets, terminal=tty)
        return await chat.loop()
    finally:
        await engine.aclose()


class Chat:
    """The shell's state: the engine, the current session, the running turn."""

    def __init__(
        self,
        engine: Engine,
        session: Session,
        view: ChatView,
        lines: Lines,
        secrets: dict[str, str],
        *,
        terminal: bool,
    ) -> None:
        self.engine = engine
        self.session = session
        self.view = view
        self.lines = lines
        self.secrets = secrets
        self.terminal = terminal
        self.run: Run | None = None
        self._last_sigint = 0.0
        self._quit = asyncio.Event()
        self._interrupting: asyncio.Future[None] | None = None
        self._asking: list[ApprovalRequestEvent | QuestionEvent] = []
        """Requests of the running turn waiting for this user's answer, oldest (the one asked) first."""
        self._deciding: set[asyncio.Future[None]] = set()

    # --- the loop ---------------------------------------------------------------------------

    async def loop(self) -> int:
        from harness_run.cli._chat_io import install_sigint

        self._welcome()
        # prompt_toolkit takes Ctrl-C at its own prompt (and removes loop handlers when done):
        # on a terminal the handler is installed per turn, from a pipe for the whole chat
        remove = None if self.terminal else install_sigint(self._on_sigint)
        try:
            while not self._quit.is_set():
                line = await self._read()
                if line is None:
                    return 130 if self._quit.is_set() else 0
                line = line.strip()
                if not line:
                    continue
                if line.startswith("/"):
                    if not await self._command(line):
                        return 0
                else:
                    await self._turn(line)
            return 130
        finally:
            if remove is not None:
                remove()

    async def _read(self) -> str | None:
        """The next line, or None at end of input or once Ctrl-C asked to quit."""
        reading = asyncio.ensure_future(self.lines.read())
        quitting = asyncio.ensure_future(self._quit.wait())
        try:
            await asyncio.wait({reading, quitting}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            quitting.cancel()
        if not reading.done():
            reading.cancel()
            return None
        try:
            return reading.result()
        except KeyboardInterrupt:  # Ctrl-C at prompt_toolkit's idle prompt
            self._quit.set()
            return None

    def _welcome(self) -> None:
        where = getattr(getattr(self.engine, "wire", None), "base_url", None)
        self.view.line(
            f"harness-run chat · engine {self.engine.name} ({self.session.spec.harness}, "
            f"{self.session.spec.model})" + (f" on {where}" if where else ""),
            "bold",
        )
        self.view.line(f"session {self.session.session_id} · /help for commands, Ctrl-C interrupts", "dim")

    def _on_sigint(self) -> None:
        now = time.monotonic()
        run = self.run
        if run is None or run.done or now - self._last_sigint < _QUIT_WINDOW:
            self.view.line("quitting", "dim")
            self._quit.set()
            return
        self._last_sigint = now
        self.view.line(f"interrupting … (Ctrl-C again within {_QUIT_WINDOW:g} s quits)", "yellow")
        self._interrupting = asyncio.ensure_future(run.interrupt())

    # --- turns ------------------------------------------------------------------------------

    async def _turn(self, prompt: str) -> None:
        from harness_run.cli._chat_io import install_sigint

        try:
            run = self.session.run(prompt, secrets=self.secrets)
        except HarnessRunError as exc:
            self.view.line(f"✗ {exc}", "red")
            return
        self.run = run
        remove = install_sigint(self._on_sigint) if self.terminal else None
        self.lines.watch(self._while_running)
        drawing = asyncio.ensure_future(self._draw(run))
        quitting = asyncio.ensure_future(self._quit.wait())
        try:
            await asyncio.wait({drawing, quitting}, return_when=asyncio.FIRST_COMPLETED)
            if drawing.done():
                drawing.result()
        except HarnessRunError as exc:
            self.view.line(f"✗ {exc}", "red")
        finally:
            quitting.cancel()
            drawing.cancel()
            self.lines.unwatch()
            if remove is not None:
                remove()
            self.run = None

    async def _draw(self, run: Run) -> None:
        from harness_run.events import (
            ApprovalDecisionEvent,
            ApprovalRequestEvent,
            QuestionAnswerEvent,
            QuestionEvent,
        )

        self._asking.clear()
        try:
            async for event in run:
                self.view.event(event)
                if isinstance(event, ApprovalRequestEvent | QuestionEvent):
                    self._asking.append(event)
                    if len(self._asking) == 1:
                        self._prompt_next()
                elif isinstance(event, ApprovalDecisionEvent | QuestionAnswerEvent):
                    self._settled(event.request_id)
            await run
        finally:
            self._asking.clear()

    def _prompt_next(self) -> None:
        if not self._asking:
            return
        asked = self._asking[0]
        self.view.ask("allow? [y/N/reason] " if asked.type == "approval_request" else "answer> ")

    def _settled(self, request_id: str) -> None:
        """A request was decided (here, by another client, or by its timeout): stop asking for it."""
        head = self._asking[0].request_id if self._asking else None
        self._asking = [a for a in self._asking if a.request_id != request_id]
        if head == request_id:
            self._prompt_next()

    def _while_running(self, line: str) -> bool:
        """A line typed while a turn runs: ``/interrupt`` acts now; the answer to an approval prompt
        (``y`` allows; Enter or ``n`` denies; other text denies with it as the reason) or a question
        is sent now; the rest waits for the turn."""
        if line == "/interrupt" and self.run is not None:
            self.view.line("interrupting …", "yellow")
            self._interrupting = asyncio.ensure_future(self.run.interrupt())
            return True
        if not self._asking:
            return not line  # an empty line: nothing to keep
        asked = self._asking[0]
        if asked.type == "question":
            if not line:
                self._prompt_next()
                return True
            decision = self.session.answer(asked.request_id, line)
        elif line.lower() in ("y", "yes"):
            decision = self.session.approve(asked.request_id)
        elif line.lower() in ("", "n", "no"):
            decision = self.session.deny(asked.request_id)
        else:
            decision = self.session.deny(asked.request_id, reason=line)
        self._asking.pop(0)
        task = asyncio.ensure_future(self._decide(decision))
        self._deciding.add(task)
        task.add_done_callback(self._deciding.discard)
        self._prompt_next()
        return True

    async def _decide(self, decision: Awaitable[object]) -> None:
        try:
            await decision
        except HarnessRunError as exc:  # decided meanwhile (another client, the timeout), or gone
            self.view.line(f"✗ {exc}", "red")

    # --- slash commands -----------------------------------------------------------------------

    async def _command(self, line: str) -> bool:
        """Run a slash command; False to quit."""
        name, _, rest = line.partition(" ")
        rest = rest.strip()
        try:
            match name:
                case "/quit" | "/exit":
                    return False
                case "/help":
                    for command, what in HELP:
                        self.view.line(f"  {command:<12} {what}")
                case "/new":
                    self.session = self.engine.start_session()
                    self.view.line(f"new session {self.session.session_id}", "green")
                case "/sessions":
                    self._sessions()
                case "/resume":
                    self._resume(rest)
                case "/interrupt":
                    await self._interrupt()
                case "/exec":
                    await self._exec(rest)
                case "/cost":
                    self._cost()
                case _:
                    self.view.line(f"unknown command {name}; /help lists them", "yellow")
        except HarnessRunError as exc:
            self.view.line(f"✗ {exc}", "red")
        return True

    def _sessions(self) -> None:
        records = self.engine.list_sessions()
        if not records:
            self.view.line("no sessions yet", "dim")
        for record in records[-20:]:
            mark = "*" if record.session_id == self.session.session_id else " "
            last = record.last_result.text if record.last_result is not None else ""
            when = time.strftime("%Y-%m-%d %H:%M", time.localtime(record.updated_at))
            self.view.line(
                f"{mark} {record.session_id}  {record.status:8} {record.turns:>3} turns  {when}  "
                + " ".join(last.split())[:40]
            )

    def _resume(self, wanted: str) -> None:
        if not wanted:
            raise UsageError("/resume needs a session id (see /sessions)")
        ids = [r.session_id for r in self.engine.list_sessions() if r.session_id.startswith(wanted)]
        if wanted in ids:
            ids = [wanted]
        if len(ids) != 1:
            what = "no session" if not ids else f"{len(ids)} sessions"
            raise UsageError(f"{what} of engine {self.engine.name} start with {wanted!r}; see /sessions")
        self.session = self.engine.get_session(ids[0])
        turns = self.session.record.turns
        self.view.line(f"resumed session {ids[0]} ({turns} turns)", "green")
        if self.session.last_result is not None and self.session.last_result.text:
            self.view.line("last answer: " + " ".join(self.session.last_result.text.split())[:200], "dim")

    async def _interrupt(self) -> None:
        running = self.session.current_run
        if running is None or running.done:
            self.view.line("no turn is running", "dim")
            return
        await self.session.interrupt()
        self.view.line("interrupted", "yellow")

    async def _exec(self, command: str) -> None:
        if not command:
            raise UsageError("/exec needs a command, e.g. /exec ls -la")
        done = await self.session.exec(command, secrets=self.secrets or None)
        for text, style in ((done.stdout, ""), (done.stderr, "red")):
            for out in text.rstrip("\n").splitlines() if text else []:
                self.view.line(out, style)
        self.view.line(f"─ exit {done.exit_code}" + (" (output truncated)" if done.truncated else ""), "dim")

    def _cost(self) -> None:
        results = [t.result for t in self.session.history() if t.result is not None]
        known = [r.cost_usd for r in results if r.cost_usd is not None]
        tokens_in = sum(r.usage.input_tokens + r.usage.cache_read_tokens for r in results)
        tokens_out = sum(r.usage.output_tokens for r in results)
        cost = f"${sum(known):.6f}" + (
            f" (+{len(results) - len(known)} turns of unknown cost)" if len(known) < len(results) else ""
        )
        self.view.line(
            f"session {self.session.session_id}: {len(results)} turns, cost {cost}, "
            f"tokens in {tokens_in}, out {tokens_out}"
        )
