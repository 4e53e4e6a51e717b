"""A scripted model server for offline tests: the real harness CLIs talk to it instead of a vendor.

``ScriptedModel`` serves the Anthropic Messages API, the OpenAI Responses API and Chat Completions on
127.0.0.1 from a script of :class:`Reply` objects and :class:`Rule` s::

    from harness_run.testing import ScriptedModel, shell, text

    with ScriptedModel([shell("echo hi > out.txt"), text("done")]) as model:
        env = model.env_for("claude-code")
        ...

How a request is answered:

* **Side requests** (title/summary generation, quota probes: no tools offered plus a title-like
  system prompt, or ``max_tokens`` <= 1 — see :func:`is_side_request`; replace it with
  ``ScriptedModel(side_detector=…)``) get :data:`SIDE_REPLY_TEXT` and never touch the script.
* **Retries**: after an ``error()``/``drop()`` reply the client's identical retries (same
  conversation) get the same failure without consuming the script (``sticky=False`` to opt out).
* **Rules** (:class:`Rule`) are checked first, in order, wherever they sit in the script; first
  match wins; not consumed unless ``times`` is set. By default they answer fresh prompts only.
* Otherwise the **next ordered reply** is consumed; when none is left the answer is the text
  :data:`EXHAUSTED_TEXT` and ``model.exhausted`` turns true (the client finishes, no hang).

Scripts can be loaded from YAML/JSON with :func:`load_script` / ``ScriptedModel.from_file``, and
served from a terminal with ``harness-run mock-model --script FILE``. A pytest fixture
``scripted_model`` comes with the ``harness_run.testing.pytest_plugin`` plugin.
"""

from harness_run.testing._cli import serve_forever
from harness_run.testing._gcs import FakeGcsServer
from harness_run.testing._loader import load_script, parse_script
from harness_run.testing._model import SIDE_REPLY_TEXT, ScriptedModel, SideDetector
from harness_run.testing._providers import PROVIDER_CHECKS, ProviderFactory, check_sandbox_provider
from harness_run.testing._replies import (
    HttpError,
    Part,
    Reply,
    Shell,
    Structured,
    Text,
    ToolCall,
    Usage,
    UsageLike,
    WriteFile,
    combine,
    drop,
    error,
    shell,
    structured,
    text,
    tool_call,
    write_file,
)
from harness_run.testing._requests import ApiKind, Message, Outcome, RecordedRequest, is_side_request
from harness_run.testing._script import EXHAUSTED_TEXT, Matcher, Rule, ScriptItem

__all__ = [
    "EXHAUSTED_TEXT",
    "PROVIDER_CHECKS",
    "SIDE_REPLY_TEXT",
    "ApiKind",
    "FakeGcsServer",
    "HttpError",
    "Matcher",
    "Message",
    "Outcome",
    "Part",
    "ProviderFactory",
    "RecordedRequest",
    "Reply",
    "Rule",
    "ScriptItem",
    "ScriptedModel",
    "Shell",
    "SideDetector",
    "Structured",
    "Text",
    "ToolCall",
    "Usage",
    "UsageLike",
    "WriteFile",
    "check_sandbox_provider",
    "combine",
    "drop",
    "error",
    "is_side_request",
    "load_script",
    "parse_script",
    "serve_forever",
    "shell",
    "structured",
    "text",
    "tool_call",
    "write_file",
]
