"""``ScriptedModel``: a loopback model server that answers from a script, for offline tests and CI.

Example::

    from harness_run.testing import ScriptedModel, shell, text

    with ScriptedModel([shell("echo hi > out.txt"), text("done")]) as model:
        env = model.env_for("claude-code")  # ANTHROPIC_BASE_URL=model.url, dummy key, no telemetry
        ...  # run the harness with env
        assert model.requests[-1].tool_results  # the second request carried the tool output

The server runs on a background thread, so it works from sync and async tests alike.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, Self

from harness_run.errors import UsageError
from harness_run.testing._replies import Reply, Usage
from harness_run.testing._requests import MAIN_OUTCOMES, RecordedRequest, is_side_request
from harness_run.testing._script import Script, ScriptItem
from harness_run.testing._server import ModelServer

__all__ = ["SIDE_REPLY_TEXT", "ScriptedModel", "SideDetector"]

log = logging.getLogger("harness_run.testing")

SIDE_REPLY_TEXT = "Scripted session"
"""What side requests (title/summary generation, quota checks) are answered with."""

SideDetector = Callable[[RecordedRequest], bool]

_HARNESS_ALIASES = {
    "claude-code": "claude-code",
    "claude": "claude-code",
    "codex": "codex",
    "opencode": "opencode",
}


class ScriptedModel:
    """A scripted Anthropic Messages / OpenAI Responses / Chat Completions server on 127.0.0.1.

    Args:
        script: initial replies and rules (see :mod:`harness_run.testing._script` for semantics).
        host: interface to bind (loopback by default).
        port: port to bind; ``0`` picks a free ephemeral port.
        side_detector: decides which requests are housekeeping (titles, summaries, quota checks) that
            get :attr:`side_reply` without consuming the script; default :func:`is_side_request`,
            ``None`` makes every model request consume the script.
        side_reply: the text side requests are answered with.
        model_name: model id reported when a request names none (and by ``/v1/models``).
        on_request: called (on the server thread) with each request once it has been answered.
    """

    def __init__(
        self,
        script: Iterable[ScriptItem] | None = None,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        side_detector: SideDetector | None = is_side_request,
        side_reply: str = SIDE_REPLY_TEXT,
        model_name: str = "scripted-model",
        on_request: Callable[[RecordedRequest], None] | None = None,
    ) -> None:
        self.script = Script(script or ())
        self.host = host
        self.side_detector = side_detector
        self.side_reply = side_reply
        self.model_name = model_name
        self.on_request = on_request
        self._port = port
        self._server: ModelServer | None = None
        self._thread: threading.Thread | None = None
        self._requests: list[RecordedRequest] = []
        self._cond = threading.Condition()
        self._last_failure: tuple[str, Reply] | None = None

    @classmethod
    def from_file(cls, path: str | Path, **kwargs: Any) -> ScriptedModel:
        """A model whose script is loaded from a YAML or JSON file (see :func:`load_script`)."""
        from harness_run.testing._loader import load_script

        return cls(load_script(path), **kwargs)

    # -- lifecycle ----------------------------------------------------------------------------

    def start(self) -> Self:
        """Bind and serve on a daemon thread (idempotent). Returns ``self``."""
        if self._server is not None:
            return self
        try:
            server = ModelServer((self.host, self._port), self)
        except OSError as exc:
            raise UsageError(f"scripted model: cannot listen on {self.host}:{self._port}: {exc}") from exc
        self._server = server
        self._thread = threading.Thread(
            target=server.serve_forever,
            kwargs={"poll_interval": 0.1},
            name=f"scripted-model:{self.port}",
            daemon=True,
        )
        self._thread.start()
        log.debug("scripted model listening on %s", self.url)
        return self

    def stop(self) -> None:
        """Stop serving, cut open connections and wake delayed replies (idempotent)."""
        server, thread = self._server, self._thread
        if server is None:
            return
        server.stopping.set()
        server.shutdown()
        server.close_connections()
        server.server_close()
        if thread is not None:
            thread.join(timeout=5)
        self._server = self._thread = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def running(self) -> bool:
        """Whether the server is started."""
        return self._server is not None

    @property
    def port(self) -> int:
        """The bound port (the ephemeral one when ``port=0``); requires :meth:`start`."""
        if self._server is None:
            raise UsageError("scripted model is not started: call start() or use it as a context manager")
        return int(self._server.server_address[1])

    @property
    def url(self) -> str:
        """Base URL without ``/v1`` (what ``ANTHROPIC_BASE_URL`` wants), e.g. ``http://127.0.0.1:PORT``."""
        host = self.host if ":" not in self.host else f"[{self.host}]"
        return f"http://{host}:{self.port}"

    @property
    def openai_url(self) -> str:
        """Base URL with ``/v1`` (what OpenAI clients' ``base_url`` wants)."""
        return f"{self.url}/v1"

    # -- script -------------------------------------------------------------------------------

    def add(self, *items: ScriptItem | Iterable[ScriptItem]) -> Self:
        """Append replies and rules to the script; returns ``self`` for chaining."""
        self.script.add(*items)
        return self

    @property
    def remaining(self) -> int:
        """Ordered replies not consumed yet."""
        return self.script.remaining

    @property
    def exhausted(self) -> bool:
        """Whether any main request found the script empty (and got the exhausted text)."""
        return self.script.exhausted_count > 0

    # -- recorded requests ---------------------------------------------------------------------

    @property
    def requests(self) -> list[RecordedRequest]:
        """Every request received so far, in arrival order (a copy)."""
        with self._cond:
            return list(self._requests)

    @property
    def main_requests(self) -> list[RecordedRequest]:
        """Model requests answered from the script (ordered reply, rule, failure retry or exhausted text)."""
        return [r for r in self.requests if r.outcome in MAIN_OUTCOMES]

    @property
    def side_requests(self) -> list[RecordedRequest]:
        """Model requests answered as side requests."""
        return [r for r in self.requests if r.outcome == "side"]

    def clear_requests(self) -> None:
        """Forget the recorded requests (the script is kept)."""
        with self._cond:
            self._requests.clear()

    def wait_for_requests(self, count: int, timeout: float = 10.0) -> list[RecordedRequest]:
        """Block until ``count`` main requests have been answered; raises ``TimeoutError``."""
        with self._cond:
            done = self._cond.wait_for(lambda: len(self._done_main()) >= count, timeout=timeout)
            if not done:
                raise TimeoutError(
                    f"scripted model: {len(self._done_main())} of {count} requests after {timeout}s"
                )
            return self._done_main()

    def _done_main(self) -> list[RecordedRequest]:
        return [r for r in self._requests if r.outcome in MAIN_OUTCOMES]

    def _record(self, request: RecordedRequest) -> None:
        with self._cond:
            self._requests.append(request)

    def _answered(self, request: RecordedRequest) -> None:
        log.debug("scripted model: %s", request.summary())
        with self._cond:
            self._cond.notify_all()
        if self.on_request is not None:
            try:
                self.on_request(request)
            except Exception:  # a logging hook must not break the server
                log.exception("scripted model: on_request hook failed")

    def _choose(self, request: RecordedRequest) -> Reply:
        if self.side_detector is not None and self.side_detector(request):
            reply = Reply.text(self.side_reply, usage=Usage(input_tokens=5, output_tokens=3))
            request.outcome, request.reply = "side", reply
            return reply
        fingerprint = request.fingerprint
        with self._cond:
            failed = self._last_failure
            if failed is not None and failed[0] == fingerprint:
                request.outcome, request.reply = "retry", failed[1]
                return failed[1]
            reply, outcome, index = self.script.next_reply(request)
            sticky = reply.sticky and (reply.http_error is not None or reply.drop_connection)
            self._last_failure = (fingerprint, reply) if sticky else None
        request.outcome, request.reply, request.rule_index = outcome, reply, index
        return reply

    # -- pointing harnesses at it ----------------------------------------------------------------

    def env_for(self, harness: str, *, api_key: str = "scripted-test-key") -> dict[str, str]:
        """Environment variables that point ``harness`` (claude-code, codex, opencode) at this server.

        Codex ignores ``OPENAI_BASE_URL``: also pass :meth:`codex_config_overrides`. OpenCode reads
        its provider from config: see :meth:`opencode_config`.
        """
        kind = _HARNESS_ALIASES.get(harness)
        if kind is None:
            raise UsageError(f"unknown harness {harness!r}; expected one of claude-code, codex, opencode")
        if kind == "claude-code":
            return {
                "ANTHROPIC_BASE_URL": self.url,
                "ANTHROPIC_API_KEY": api_key,
                "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
                "DISABLE_AUTOUPDATER": "1",
                "DISABLE_TELEMETRY": "1",
                "DISABLE_ERROR_REPORTING": "1",
            }
        return {"OPENAI_BASE_URL": self.openai_url, "OPENAI_API_KEY": api_key}

    def codex_config_overrides(
        self, provider: str = "scripted", *, env_key: str = "OPENAI_API_KEY", retries: int = 0
    ) -> list[str]:
        """``codex -c key=value`` overrides selecting a Responses provider at this server, offline."""
        base = f"model_providers.{provider}"
        return [
            f'model_provider="{provider}"',
            f'{base}.name="{provider}"',
            f'{base}.base_url="{self.openai_url}"',
            f'{base}.env_key="{env_key}"',
            f'{base}.wire_api="responses"',
            f"{base}.request_max_retries={retries}",
            f"{base}.stream_max_retries={retries}",
            "features.plugins=false",
            "analytics.enabled=false",
        ]

    def opencode_config(self, provider: str = "scripted", model: str | None = None) -> dict[str, Any]:
        """An OpenCode config (for ``OPENCODE_CONFIG_CONTENT``) with an openai-compatible provider here."""
        model = model or self.model_name
        return {
            "$schema": "https://opencode.ai/config.json",
            "provider": {
                provider: {
                    "npm": "@ai-sdk/openai-compatible",
                    "name": provider,
                    "options": {"baseURL": self.openai_url, "apiKey": "scripted-test-key"},
                    "models": {model: {"name": model}},
                }
            },
            "model": f"{provider}/{model}",
            "permission": {"edit": "allow", "bash": "allow"},
            "autoupdate": False,
            "share": "disabled",
        }

    def __repr__(self) -> str:
        where = self.url if self.running else "stopped"
        return f"<ScriptedModel {where} remaining={self.remaining} requests={len(self.requests)}>"
