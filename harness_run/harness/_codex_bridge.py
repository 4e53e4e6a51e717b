"""A Codex session's turns in one ``codex app-server`` process, spoken as ``codex exec --json``.

Run as a script (standard library only, nothing of harness_run imported: it starts fast) by
the Codex driver as the session's harness process: ``python -I -S _codex_bridge.py <codex binary>``,
with the environment and working directory ``codex exec`` would get. It starts
``codex app-server`` (stdio JSON-RPC, the v2 API) as its child, in its process group (which the
engine keeps between turns, and ends as a whole; Codex runs tool commands in sessions of their
own), and sends ``initialize``. Then, per turn, it reads one JSON line on stdin::

    {"prompt": str, "thread_id": str | null, "model": str, "cwd": str, "output_schema": obj | null}

and sends ``thread/start`` (no thread id) or ``thread/resume`` (a thread this process has not
loaded), then ``turn/start``; the notifications until ``turn/completed`` are printed on stdout as
the lines ``codex exec --json`` prints (``thread.started``, ``item.*``, ``turn.completed`` or
``turn.failed``, ``error``), so the driver's parser reads them unchanged and is finished at the
turn's last line. At stdin EOF, or when app-server exits, it ends app-server and exits.

Every ``thread/start`` and ``thread/resume`` carries ``config.bypass_hook_trust = true``: without
it app-server silently skips the PreToolUse hook (harness-run's guard), which Codex counts as
untrusted — the same switch as ``codex exec --dangerously-bypass-hook-trust``.

Before a turn's last line it waits (briefly) until the thread's rollout holds the usage record of
every model response of the turn: the parser reads a turn's usage from there, and the process does
not exit (which flushes the rollout under ``codex exec``).
"""

from __future__ import annotations

import contextlib
import glob
import json
import os
import queue
import subprocess
import sys
import threading
import time
from typing import Any, cast

BYPASS_HOOK_TRUST = {"bypass_hook_trust": True}
"""In every thread/start and thread/resume: else the guard hook does not run (it fails open)."""
_ROLLOUT_WAIT_S = 2.0
_REQUEST_TIMEOUT_S = 120.0
_ITEM_TYPES = {
    "agentMessage": "agent_message",
    "reasoning": "reasoning",
    "commandExecution": "command_execution",
    "fileChange": "file_change",
    "mcpToolCall": "mcp_tool_call",
    "webSearch": "web_search",
    "plan": "todo_list",
}
_STATUS = {"inProgress": "in_progress", "completed": "completed", "failed": "failed", "declined": "failed"}


def _obj(value: Any) -> dict[str, Any]:
    return cast(dict[str, Any], value) if isinstance(value, dict) else {}


def _list(value: Any) -> list[Any]:
    return cast(list[Any], value) if isinstance(value, list) else []


class AppServerGone(Exception):
    """app-server exited (or closed its stdout)."""


class AppServer:
    """``codex app-server`` on stdio: requests, and the notifications that come meanwhile."""

    def __init__(self, binary: str) -> None:
        self.proc = subprocess.Popen(
            [binary, "app-server"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=None,  # ours: the turn's stderr tail
        )
        self._messages: queue.Queue[dict[str, Any] | None] = queue.Queue()
        self._next_id = 0
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for raw in self.proc.stdout:
            try:
                message = json.loads(raw)
            except ValueError:
                continue
            if isinstance(message, dict):
                self._messages.put(_obj(message))
        self._messages.put(None)

    def send(self, message: dict[str, Any]) -> None:
        assert self.proc.stdin is not None
        try:
            self.proc.stdin.write((json.dumps(message) + "\n").encode())
            self.proc.stdin.flush()
        except OSError:
            raise AppServerGone from None

    def next(self, timeout: float | None = None) -> dict[str, Any]:
        """The next message that is not a server request (those are declined: there is nobody to
        ask, and the approval policy is ``never``)."""
        while True:
            try:
                message = self._messages.get(timeout=timeout)
            except queue.Empty:
                raise TimeoutError from None
            if message is None:
                self._messages.put(None)
                raise AppServerGone
            if "method" in message and "id" in message:
                self.send({"jsonrpc": "2.0", "id": message["id"], "result": {"decision": "decline"}})
                continue
            return message

    def request(self, method: str, params: dict[str, Any], notes: list[dict[str, Any]]) -> Any:
        """Send a request and return its result; notifications meanwhile go to ``notes``."""
        self._next_id += 1
        rid = self._next_id
        self.send({"jsonrpc": "2.0", "id": rid, "method": method, "params": params})
        deadline = time.monotonic() + _REQUEST_TIMEOUT_S
        while True:
            message = self.next(timeout=max(0.1, deadline - time.monotonic()))
            if message.get("id") == rid and "method" not in message:
                if "error" in message:
                    error = message["error"]
                    raise RuntimeError(f"codex app-server {method}: {_obj(error).get('message') or error}")
                return message.get("result")
            notes.append(message)

    def stop(self) -> None:
        if self.proc.stdin is not None:
            with contextlib.suppress(OSError):
                self.proc.stdin.close()
        try:
            self.proc.wait(2.0)
        except subprocess.TimeoutExpired:
            self.proc.terminate()
            try:
                self.proc.wait(2.0)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def _item(item: dict[str, Any]) -> dict[str, Any] | None:
    """An app-server thread item as ``codex exec --json`` prints it (None: exec prints nothing)."""
    kind = _ITEM_TYPES.get(str(item.get("type")))
    if kind is None:
        return None  # userMessage, hookPrompt, contextCompaction …
    out: dict[str, Any] = {"id": item.get("id"), "type": kind}
    status = _STATUS.get(str(item.get("status")), item.get("status"))
    if kind == "agent_message":
        out["text"] = item.get("text") or ""
    elif kind == "reasoning":
        out["text"] = "\n".join(str(s) for s in [*_list(item.get("summary")), *_list(item.get("content"))])
    elif kind == "command_execution":
        out.update(
            command=item.get("command"),
            aggregated_output=item.get("aggregatedOutput") or "",
            exit_code=item.get("exitCode"),
            status=status,
        )
    elif kind == "mcp_tool_call":
        out.update(
            server=item.get("server"),
            tool=item.get("tool"),
            arguments=item.get("arguments"),
            result=item.get("result"),
            error=item.get("error"),
            status=status,
        )
    elif kind == "file_change":
        out.update(changes=item.get("changes") or [], status=status)
    elif kind == "web_search":
        out["query"] = item.get("query")
    elif kind == "todo_list":
        out["items"] = item.get("plan") or []
    return out


def exec_line(note: dict[str, Any]) -> dict[str, Any] | None:
    """The ``codex exec --json`` line for one app-server notification (None: none)."""
    method, params = note.get("method"), _obj(note.get("params"))
    if method in ("item/started", "item/completed") and isinstance(params.get("item"), dict):
        item = _item(_obj(params["item"]))
        return None if item is None else {"type": str(method).replace("/", "."), "item": item}
    if method == "turn/started":
        return {"type": "turn.started"}
    if method == "turn/completed":
        turn = _obj(params.get("turn"))
        if turn.get("status") == "completed":
            return {"type": "turn.completed"}
        error = _obj(turn.get("error"))
        return {
            "type": "turn.failed",
            "error": {"message": error.get("message") or f"turn {turn.get('status')}"},
        }
    if method == "error":
        error = _obj(params.get("error"))
        return {"type": "error", "message": error.get("message") or ""}
    if method == "warning" and params.get("message"):
        return {
            "type": "item.completed",
            "item": {"id": "warning", "type": "error", "message": params["message"]},
        }
    return None


def _usage_records(path: str | None) -> int:
    if path is None:
        return 0
    try:
        with open(path, "rb") as handle:
            return sum(1 for line in handle if b'"token_usage_record"' in line)
    except OSError:
        return 0


def _rollout(thread_id: str) -> str | None:
    home = os.environ.get("CODEX_HOME")  # the session's own, set by the driver
    if not home:
        return None
    found = sorted(glob.glob(os.path.join(home, "sessions", "*", "*", "*", f"rollout-*-{thread_id}.jsonl")))
    return found[-1] if found else None


class Bridge:
    def __init__(self, binary: str) -> None:
        self.binary = binary
        self.app = AppServer(binary)
        self.loaded: set[str] = set()

    def print(self, line: dict[str, Any]) -> None:
        sys.stdout.write(json.dumps(line, separators=(",", ":")) + "\n")
        sys.stdout.flush()

    def start(self) -> None:
        notes: list[dict[str, Any]] = []
        self.app.request(
            "initialize",
            {
                "clientInfo": {"name": "harness-run", "version": "1"},
                "capabilities": {"experimentalApi": True},
            },
            notes,
        )
        self.app.send({"jsonrpc": "2.0", "method": "initialized"})

    def turn(self, request: dict[str, Any]) -> None:
        notes: list[dict[str, Any]] = []
        thread_id = request.get("thread_id")
        model, cwd = request.get("model"), request.get("cwd")
        try:
            if not thread_id:
                params = {"cwd": cwd, "model": model, "config": BYPASS_HOOK_TRUST}
                thread_id = self.app.request("thread/start", params, notes)["thread"]["id"]
                self.loaded.add(thread_id)
            elif thread_id not in self.loaded:
                params = {"threadId": thread_id, "cwd": cwd, "model": model, "config": BYPASS_HOOK_TRUST}
                params["excludeTurns"] = True
                self.app.request("thread/resume", params, notes)
                self.loaded.add(thread_id)
        except RuntimeError as exc:
            self.print({"type": "error", "message": str(exc)})
            self.print({"type": "turn.failed", "error": {"message": str(exc)}})
            return
        self.print({"type": "thread.started", "thread_id": thread_id})
        rollout = _rollout(thread_id)
        before = _usage_records(rollout)
        params: dict[str, Any] = {
            "threadId": thread_id,
            "input": [{"type": "text", "text": request.get("prompt", "")}],
        }
        if model:
            params["model"] = model
        if request.get("output_schema") is not None:
            params["outputSchema"] = request["output_schema"]
        responses = 0  # model responses of this turn
        try:
            turn_id = _obj(_obj(self.app.request("turn/start", params, notes)).get("turn")).get("id")
        except RuntimeError as exc:
            self.print({"type": "turn.failed", "error": {"message": str(exc)}})
            return
        while True:
            for note in notes:
                params = _obj(note.get("params"))
                of = params.get("turnId") or _obj(params.get("turn")).get("id")
                if of is not None and of != turn_id:
                    continue  # the end of an earlier turn, read only now
                responses += note.get("method") == "thread/tokenUsage/updated"
                line = exec_line(note)
                if line is None:
                    continue
                if line["type"] in ("turn.completed", "turn.failed"):
                    self._await_rollout(rollout or _rollout(thread_id), before + responses)
                    self._release(thread_id)
                    self.print(line)
                    self._renew()
                    return
                self.print(line)
            notes = [self.app.next()]

    def _release(self, thread_id: str) -> None:
        """Before the turn's last line, end this app-server: while it lives it is the thread's only
        writer (``thread/unsubscribe`` does not release it), and the session's next turn may run in
        another process (a re-attached session resumes there). A fresh app-server is started after
        the line (:meth:`_renew`), while the process waits for its next turn, which resumes the
        thread there."""
        self.app.stop()
        self.loaded.discard(thread_id)

    def _renew(self) -> None:
        """A fresh, initialized app-server for the next turn (started while parked)."""
        self.app = AppServer(self.binary)
        with contextlib.suppress(RuntimeError, TimeoutError, AppServerGone):
            self.start()  # else the next turn's request fails and says why

    def _await_rollout(self, path: str | None, records: int) -> None:
        """Until the rollout holds ``records`` usage records (the turn's responses), at most 2 s."""
        deadline = time.monotonic() + _ROLLOUT_WAIT_S
        while _usage_records(path) < records and time.monotonic() < deadline:
            time.sleep(0.005)

    def serve(self) -> int:
        try:
            self.start()
            for raw in sys.stdin.buffer:
                if not raw.strip():
                    continue
                self.turn(_obj(json.loads(raw)))
        except AppServerGone:
            return 1
        finally:
            self.app.stop()
        return 0


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        sys.stderr.write("usage: _codex_bridge.py <codex binary>\n")
        return 2
    return Bridge(argv[1]).serve()


if __name__ == "__main__":
    sys.exit(main(sys.argv))
