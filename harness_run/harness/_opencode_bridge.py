"""OpenCode's kept process: ``opencode serve`` driven over its HTTP API, one turn per stdin line.

Run as ``python -I -S _opencode_bridge.py OPENCODE`` (standard library only) with the launch plan's
environment and the session's workspace as its working directory. It starts ``OPENCODE serve`` on
127.0.0.1 (a random port; a random ``OPENCODE_SERVER_PASSWORD`` in the server's environment only,
never on a command line) as its child, in its process group, and then reads one JSON object per
stdin line::

    {"prompt": "...", "session": "ses_..." | null, "title": "...", "model": "provider/model", "auto": true}

For each it does what ``opencode run --format json --thinking [--auto]`` does in-process: subscribe
to ``/event``, create the session (with ``run``'s deny rules for ``question``, ``plan_enter`` and
``plan_exit``) unless one is given, post the prompt, answer permission requests (``once`` with
``auto``, else ``reject``), and print the same JSON lines ``run`` prints (``step_start``, ``text``,
``reasoning``, ``tool_use``, ``step_finish``, ``error``) until the session is idle; then one
``{"type": "done"}`` line, which ends the turn. Failures (the server does not start, a request is
refused, the server stops) are an ``error`` line and ``done``. At stdin's end it stops the server
and exits; it also exits when the server stops between turns (the kept process is then gone). A
process started before its first turn (the engine's pool) has the server load the session's config,
agents and providers meanwhile, which the first prompt would do (about a second).

``opencode run --attach`` cannot replace this: it returns without reading the session's last events.
"""

import base64
import http.client
import json
import os
import re
import select
import signal
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Generator
from typing import Any, cast
from urllib.parse import quote

_RULES = [  # what `opencode run` puts on a session it creates (nobody answers these headless)
    {"permission": name, "action": "deny", "pattern": "*"} for name in ("question", "plan_enter", "plan_exit")
]
_LISTENING = re.compile(r"listening on http://([0-9.]+):(\d+)")
_START_TIMEOUT_S = 60.0


class ServerError(Exception):
    """The server is not there or refused a request (the message says which)."""


class Server:
    """``opencode serve`` on 127.0.0.1, and plain HTTP/SSE calls to it."""

    def __init__(self, binary: str) -> None:
        password = os.urandom(24).hex()
        self._auth = "Basic " + base64.b64encode(f"opencode:{password}".encode()).decode()
        self._stderr: deque[str] = deque(maxlen=40)
        self.stopping = False
        self.busy = False
        """A turn is running: if the server stops now, the turn says so before this process exits."""
        self.proc = subprocess.Popen(
            [binary, "serve", "--hostname", "127.0.0.1", "--port", "0", "--pure"],
            env={**os.environ, "OPENCODE_SERVER_PASSWORD": password},
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        assert self.proc.stdout is not None
        assert self.proc.stderr is not None
        threading.Thread(target=self._keep_tail, args=(self.proc.stderr,), daemon=True).start()
        self.port = self._port(self.proc.stdout)
        threading.Thread(target=self._drain, args=(self.proc.stdout,), daemon=True).start()
        self.query = "?directory=" + quote(os.getcwd(), safe="")

    def _port(self, stdout: Any) -> int:
        deadline = threading.Timer(_START_TIMEOUT_S, self.proc.kill)  # a server that never says
        deadline.start()
        try:
            for raw in iter(stdout.readline, b""):
                found = _LISTENING.search(raw.decode(errors="replace"))
                if found:
                    return int(found.group(2))
        finally:
            deadline.cancel()
        raise ServerError(f"opencode serve exited (code {self.proc.wait()}) before listening: {self.tail()}")

    def _keep_tail(self, stream: Any) -> None:
        for raw in iter(stream.readline, b""):
            self._stderr.append(raw.decode(errors="replace"))

    def _drain(self, stream: Any) -> None:
        for _ in iter(stream.readline, b""):
            pass

    def tail(self) -> str:
        return "".join(self._stderr).strip() or "no output"

    def _connect(self, timeout: float | None) -> http.client.HTTPConnection:
        return http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)

    def call(self, method: str, path: str, body: Any = None) -> Any:
        """The JSON answer (None when empty); ServerError on a status >= 400 or a lost server."""
        conn = self._connect(600.0)
        try:
            data = None if body is None else json.dumps(body).encode()
            headers = {"authorization": self._auth, "content-type": "application/json"}
            conn.request(method, path + self.query, body=data, headers=headers)
            resp = conn.getresponse()
            raw = resp.read()
        except OSError as exc:
            raise ServerError(
                f"opencode serve did not answer {method} {path}: {exc}: {self.tail()}"
            ) from None
        finally:
            conn.close()
        if resp.status >= 400:
            raise ServerError(f"opencode serve refused {method} {path} (HTTP {resp.status}): {_message(raw)}")
        return json.loads(raw) if raw.strip() else None

    def events(self) -> Generator[dict[str, Any]]:
        """The server's events for the directory (SSE), from the moment this returns."""
        conn = self._connect(None)  # a turn may wait long between events: its timeout is the engine's
        try:
            headers = {"authorization": self._auth, "accept": "text/event-stream"}
            conn.request("GET", "/event" + self.query, headers=headers)
            resp = conn.getresponse()
        except OSError as exc:
            conn.close()
            raise ServerError(f"opencode serve did not answer GET /event: {exc}: {self.tail()}") from None
        if resp.status != 200:
            conn.close()
            raise ServerError(f"opencode serve refused GET /event (HTTP {resp.status})")
        return _sse(conn, resp)

    def stop(self) -> None:
        self.stopping = True
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def _sse(conn: http.client.HTTPConnection, resp: http.client.HTTPResponse) -> Generator[dict[str, Any]]:
    data: list[str] = []
    try:
        while raw := resp.readline():
            line = raw.decode(errors="replace").rstrip("\r\n")
            if line.startswith("data:"):
                data.append(line[5:].lstrip())
            elif not line and data:
                event = json.loads("\n".join(data))
                data = []
                if isinstance(event, dict):
                    yield cast(dict[str, Any], event)
    except OSError:
        return
    finally:
        conn.close()


def _message(raw: bytes) -> str:
    try:
        body = json.loads(raw)
    except ValueError:
        return raw.decode(errors="replace")[:500] or "no body"
    if isinstance(body, dict):
        found = cast(dict[str, Any], body)
        data = found.get("data")
        if isinstance(data, dict) and "message" in data:
            return str(cast(dict[str, Any], data)["message"])
        if "message" in found:
            return str(found["message"])
    return json.dumps(body)[:500]


def _out(kind: str, session: str | None, **data: Any) -> None:
    line = {"type": kind, "timestamp": int(time.time() * 1000), **({"sessionID": session} if session else {})}
    sys.stdout.write(json.dumps({**line, **data}, separators=(",", ":")) + "\n")
    sys.stdout.flush()


def _fail(session: str | None, message: str) -> None:
    """An ``error`` line as ``run`` prints one (``error.data.message``), then ``done``."""
    _out("error", session, error={"name": "HarnessRunBridgeError", "data": {"message": message}})
    _out("done", session, reason="error")


def _dict(value: Any) -> dict[str, Any]:
    return cast(dict[str, Any], value) if isinstance(value, dict) else {}


def turn(server: Server, request: dict[str, Any]) -> None:
    """One turn: the lines ``opencode run --format json --thinking`` prints, then ``done``."""
    session = request.get("session") or None
    try:
        stream = server.events()
    except ServerError as exc:
        _fail(session, str(exc))
        return
    try:
        if session is None:
            created = server.call("POST", "/session", {"title": request.get("title"), "permission": _RULES})
            session = str(_dict(created)["id"])
        else:
            server.call("GET", f"/session/{quote(session, safe='')}")  # 404: "Session not found"
        provider, _, model = request["model"].partition("/")
        body = {
            "parts": [{"type": "text", "text": request["prompt"]}],
            "model": {"providerID": provider, "modelID": model},
        }
        server.call("POST", f"/session/{quote(session, safe='')}/prompt_async", body)
        _follow(server, stream, session, bool(request.get("auto")))
    except ServerError as exc:
        _fail(session, str(exc))
    finally:
        stream.close()


def _follow(server: Server, stream: Generator[dict[str, Any]], session: str, auto: bool) -> None:
    sessions = {session}  # and its subagents' sessions, for permission requests
    rejected: list[str] = []
    for event in stream:
        kind, props = event.get("type"), _dict(event.get("properties"))
        if kind == "session.created":
            info = _dict(props.get("info"))
            if info.get("parentID") in sessions:
                sessions.add(str(info.get("id")))
        elif kind == "message.part.updated":
            part = _dict(props.get("part"))
            if part.get("sessionID") == session:
                _part(session, part)
        elif kind == "session.error" and props.get("sessionID") == session and props.get("error"):
            _out("error", session, error=props["error"])
        elif kind == "permission.asked" and props.get("sessionID") in sessions:
            if not auto:
                rejected.append(str(props.get("permission")))
            reply = {"reply": "once" if auto else "reject"}
            server.call("POST", f"/permission/{quote(str(props.get('id')), safe='')}/reply", reply)
        elif kind == "session.status" and props.get("sessionID") == session and _idle(props):
            _out("done", session, reason="idle", rejected=rejected)
            return
    raise ServerError(f"opencode serve stopped in the middle of the turn: {server.tail()}")


def _idle(props: dict[str, Any]) -> bool:
    return _dict(props.get("status")).get("type") == "idle"


def _part(session: str, part: dict[str, Any]) -> None:
    kind, ended = part.get("type"), bool(_dict(part.get("time")).get("end"))
    if kind == "tool" and _dict(part.get("state")).get("status") in ("completed", "error"):
        _out("tool_use", session, part=part)
    elif kind in ("step-start", "step-finish"):
        _out(str(kind).replace("-", "_"), session, part=part)
    elif kind in ("text", "reasoning") and ended:
        _out(str(kind), session, part=part)


def _prewarm(server: Server) -> None:
    """No turn yet (a pooled process): load the session's config, agents and providers now,
    which the first prompt would do (about a second)."""
    for path in ("/agent", "/provider"):
        try:
            server.call("GET", path)
        except ServerError:
            return  # the turn will say what is wrong


def _watch(server: Server) -> None:
    """The server stopped by itself between turns: so does this process (the engine then starts a
    fresh one for the session's next turn). In a turn, the turn reports it first."""
    server.proc.wait()
    if not server.stopping and not server.busy:
        os._exit(1)


def _terminated(signum: int, frame: object) -> None:
    sys.exit(128 + signum)


def main(argv: list[str]) -> int:
    signal.signal(signal.SIGTERM, _terminated)  # stop the server on the way out
    try:
        server = Server(argv[1])
    except (OSError, ServerError) as exc:
        _fail(None, f"cannot start opencode serve: {exc}")
        return 1
    threading.Thread(target=_watch, args=(server,), daemon=True).start()
    if not select.select([sys.stdin.buffer], [], [], 0)[0]:
        _prewarm(server)
    try:
        while raw := sys.stdin.buffer.readline():
            if not raw.strip():
                continue
            server.busy = True
            try:
                request = _dict(json.loads(raw))
            except ValueError:
                request = {}
            if isinstance(request.get("prompt"), str) and isinstance(request.get("model"), str):
                turn(server, request)
            else:
                _fail(None, f"not a turn for the OpenCode bridge: {raw[:200]!r}")
            server.busy = False
            if server.proc.poll() is not None:
                return 1  # the server is gone: so is this kept process
    finally:
        server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
