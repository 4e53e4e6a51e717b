"""Foreground serving for ``harness-run mock-model``."""

from __future__ import annotations

import shlex
import signal
import sys
import threading
from types import FrameType

from harness_run.testing._loader import load_script
from harness_run.testing._model import ScriptedModel
from harness_run.testing._requests import RecordedRequest

__all__ = ["serve_forever"]


def _print_request(request: RecordedRequest) -> None:
    reply = f" -> {request.reply.describe()}" if request.reply is not None else ""
    sys.stdout.write(f"[{request.outcome}] {request.method} {request.path}{reply}\n")
    sys.stdout.flush()


def serve_forever(script_path: str | None, host: str, port: int) -> int:
    """Serve the script at ``script_path`` (empty script when ``None``) until Ctrl-C or SIGTERM.

    Prints the base URL and, per harness, the ``export`` lines that point it here. Returns 0.
    Bad script files raise :class:`harness_run.errors.UsageError` before anything is served.
    """
    script = load_script(script_path) if script_path else []
    model = ScriptedModel(script, host=host, port=port, on_request=_print_request)
    stop = threading.Event()

    def _on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()

    model.start()
    previous = signal.signal(signal.SIGTERM, _on_signal)
    try:
        out = sys.stdout
        out.write(f"scripted model listening on {model.url}  (OpenAI base URL: {model.openai_url})\n")
        out.write(
            f"script: {script_path or '(empty)'}, {model.remaining} ordered replies, "
            f"{len(model.script.rules)} rules\n"
        )
        for harness in ("claude-code", "codex", "opencode"):
            out.write(f"\n# {harness}\n")
            for key, value in model.env_for(harness).items():
                out.write(f"export {key}={shlex.quote(value)}\n")
        out.write(
            "\n# codex also needs: "
            + " ".join(f"-c {shlex.quote(o)}" for o in model.codex_config_overrides())
            + "\n\nPress Ctrl-C to stop.\n"
        )
        out.flush()
        while not stop.wait(0.2):
            pass
    except KeyboardInterrupt:
        pass
    finally:
        model.stop()
        signal.signal(signal.SIGTERM, previous)
        served = model.requests
        sys.stdout.write(
            f"\nstopped after {len(served)} requests{' (script exhausted)' if model.exhausted else ''}\n"
        )
    return 0
