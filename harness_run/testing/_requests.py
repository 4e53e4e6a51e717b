"""What the scripted model received: :class:`RecordedRequest`, normalized across the three APIs.

Each request keeps its raw parsed body and exposes API-neutral views of it: the system prompt, the
messages (user text, assistant text, tool calls, tool results), the tool names offered and the
working directory the client reports. Credential headers are redacted before anything is stored.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, cast

from harness_run.testing._replies import Reply

__all__ = [
    "MAIN_OUTCOMES",
    "MODEL_APIS",
    "ApiKind",
    "Message",
    "Outcome",
    "RecordedRequest",
    "is_side_request",
    "redact_headers",
]

ApiKind = Literal["anthropic", "responses", "chat", "count_tokens", "models", "other"]
"""Which endpoint a request hit: Anthropic Messages, OpenAI Responses, Chat Completions, or another."""

Outcome = Literal[
    "script", "rule", "retry", "side", "exhausted", "endpoint", "not_found", "failed", "pending"
]
"""How a request was answered: the next ordered reply, a rule, the same failure again for a client's
identical retry of a failed request, a side-request canned text, the "script exhausted" text, a
non-model endpoint (count_tokens, models), 404, or "failed" (the server itself raised; see
``RecordedRequest.failure``)."""

MAIN_OUTCOMES: frozenset[str] = frozenset({"script", "rule", "retry", "exhausted"})

_VERTEX_MODEL = re.compile(r"/publishers/anthropic/models/([^/:]+):(?:stream)?[rR]awPredict$")
"""Vertex AI's Anthropic paths: ``…/publishers/anthropic/models/<model>:streamRawPredict``."""
MODEL_APIS: frozenset[str] = frozenset({"anthropic", "responses", "chat"})

_SECRET_HEADERS = frozenset(
    {"authorization", "proxy-authorization", "x-api-key", "api-key", "cookie", "x-goog-api-key"}
)
# A text block that is nothing but one <tag>…</tag> wrapper: harness-injected context, not user text.
_WRAPPER = re.compile(r"^\s*<([A-Za-z_][\w -]*)>.*</\1>\s*$", re.DOTALL)
_CWD_PATTERNS = (
    re.compile(r"Primary working directory:\s*(\S+)"),
    re.compile(r"<cwd>\s*([^<\s]+)\s*</cwd>"),
    re.compile(r"[Ww]orking directory:\s*(\S+)"),
)
_SIDE_SYSTEM = re.compile(
    r"\btitle\b|summari[sz]|\bkebab-case name\b|topic of this conversation", re.IGNORECASE
)


def redact_headers(headers: Iterable[tuple[str, str]]) -> dict[str, str]:
    """Lower-cased header names; values of credential headers replaced with ``***``."""
    return {k.lower(): ("***" if k.lower() in _SECRET_HEADERS else v) for k, v in headers}


def credential_sha256(headers: Iterable[tuple[str, str]]) -> str | None:
    """sha256 (hex) of the request's credential (``x-api-key``, or the ``Authorization`` bearer
    token), so tests can check which key reached the model without the key being kept."""
    import hashlib

    found = {k.lower(): v for k, v in headers}
    value = found.get("x-api-key") or found.get("authorization", "").removeprefix("Bearer ").strip()
    return hashlib.sha256(value.encode()).hexdigest() if value else None


@dataclass(frozen=True, slots=True)
class Message:
    """One conversation entry, normalized: ``role`` is system/user/assistant/tool."""

    role: str
    texts: tuple[str, ...] = ()
    tool_calls: tuple[tuple[str, str], ...] = ()  # (name, JSON arguments)
    tool_results: tuple[str, ...] = ()

    @property
    def user_texts(self) -> tuple[str, ...]:
        """Texts minus injected wrapper blocks (``<system-reminder>…``, ``<environment_context>…``)."""
        return tuple(t for t in self.texts if t.strip() and not _WRAPPER.match(t))


@dataclass
class RecordedRequest:
    """One HTTP request the scripted model received, with API-neutral helpers.

    ``outcome`` and ``reply`` are filled in once the request is answered.
    """

    api: ApiKind
    method: str
    path: str
    query: str
    headers: dict[str, str]
    body: Any
    outcome: Outcome = "pending"
    reply: Reply | None = None
    rule_index: int | None = None
    failure: str | None = None
    credential_sha256: str | None = None
    """sha256 (hex) of the credential the client sent (see :func:`credential_sha256`)."""
    _messages: list[Message] | None = field(default=None, init=False, repr=False, compare=False)

    # -- raw fields --------------------------------------------------------------------------

    @property
    def json(self) -> dict[str, Any]:
        """The parsed JSON body, or ``{}`` when there was none (or it was not an object)."""
        body: object = self.body
        return cast(dict[str, Any], body) if isinstance(body, dict) else {}

    @property
    def model(self) -> str | None:
        """The ``model`` the client asked for (on Vertex AI: the one named in the path)."""
        value = self.json.get("model")
        if isinstance(value, str):
            return value
        found = _VERTEX_MODEL.search(self.path)
        return found.group(1) if found else None

    @property
    def stream(self) -> bool:
        """Whether the client asked for a streamed (SSE) answer."""
        return bool(self.json.get("stream")) or self.path.endswith(":streamRawPredict")

    @property
    def is_model_request(self) -> bool:
        """A request for a model response (not count_tokens, models or an unknown path)."""
        return self.api in MODEL_APIS

    @property
    def is_side(self) -> bool:
        """Answered as a side request (title, summary, quota check) without touching the script."""
        return self.outcome == "side"

    # -- conversation views ------------------------------------------------------------------

    @property
    def messages(self) -> list[Message]:
        """The conversation (system entries excluded), normalized across APIs."""
        if self._messages is None:
            self._messages = [m for m in _normalize(self.api, self.json) if m.role != "system"]
        return self._messages

    @property
    def system_text(self) -> str:
        """The system prompt / instructions, plus system- and developer-role messages."""
        body = self.json
        parts: list[str] = []
        if self.api == "anthropic":
            parts.extend(_texts(body.get("system")))
        if self.api == "responses" and isinstance(body.get("instructions"), str):
            parts.append(body["instructions"])
        parts.extend(t for m in _normalize(self.api, body) if m.role == "system" for t in m.texts)
        return "\n".join(parts)

    @property
    def text(self) -> str:
        """All message text (any role, tool calls' arguments and tool results), newline-joined."""
        out: list[str] = []
        for m in self.messages:
            out.extend(m.texts)
            out.extend(args for _, args in m.tool_calls)
            out.extend(m.tool_results)
        return "\n".join(out)

    @property
    def user_texts(self) -> list[str]:
        """Every user-typed text, oldest first (harness-injected wrapper blocks removed)."""
        return [t for m in self.messages if m.role == "user" for t in m.user_texts]

    @property
    def last_user_text(self) -> str:
        """The most recent user message text (skipping tool results and injected context)."""
        for m in reversed(self.messages):
            if m.role == "user" and m.user_texts:
                return "\n".join(m.user_texts)
        return ""

    @property
    def tool_names(self) -> list[str]:
        """Names of the tools the client offered in this request.

        Includes tools offered inside the input, as Codex does for models in its "code mode"
        (an ``additional_tools`` item whose namespaces hold the tools).
        """
        names = _tool_names(self.json.get("tools"))
        for item in _dicts(self.json.get("input")):
            if item.get("type") == "additional_tools":
                names.extend(_tool_names(item.get("tools")))
        return names

    @property
    def tool_results(self) -> list[str]:
        """Contents of every tool result carried in the conversation, oldest first."""
        return [r for m in self.messages for r in m.tool_results]

    @property
    def tool_calls(self) -> list[tuple[str, str]]:
        """Earlier assistant tool calls carried in the conversation, as ``(name, JSON arguments)``."""
        return [c for m in self.messages for c in m.tool_calls]

    @property
    def has_tool_result(self) -> bool:
        """Whether the conversation ends with tool results (the client reports back after a tool ran)."""
        for m in reversed(self.messages):
            if m.tool_results:
                return True
            if m.user_texts or m.role == "assistant":
                return False
        return False

    @property
    def cwd(self) -> str | None:
        """The working directory the client reports in its prompt, when it does."""
        haystack = self.system_text + "\n" + "\n".join(t for m in self.messages for t in m.texts)
        for pattern in _CWD_PATTERNS:
            found = pattern.search(haystack)
            if found:
                return found.group(1)
        return None

    @property
    def fingerprint(self) -> str:
        """Identity of the conversation, to spot a client's retries of the same request.

        Built from the normalized messages (user text without injected wrapper blocks, tool calls,
        tool results) and client session markers (``metadata``, ``prompt_cache_key``). It ignores
        what clients change when they retry: Claude Code re-sends a broken stream without
        streaming, and after a 400 drops betas one by one, which changes ``thinking``, the tools
        and the injected ``<system-reminder>`` blocks.
        """
        convo = [(m.role, m.user_texts, m.tool_calls, m.tool_results) for m in self.messages]
        markers = {k: self.json.get(k) for k in ("metadata", "prompt_cache_key")}
        return f"{self.api} {self.path} " + json.dumps([convo, markers], sort_keys=True, default=str)

    def summary(self) -> str:
        """One line for logs: API, path, outcome and the last user text."""
        return f"{self.api} {self.path} -> {self.outcome}: {self.last_user_text[:60]!r}"


def is_side_request(request: RecordedRequest) -> bool:
    """The default side-request heuristic: housekeeping calls that must not consume the script.

    True when the request offers **no tools** and either its system prompt looks like a title or
    summary generator (``title``, ``summarize``, ``kebab-case name``, ``topic of this conversation``
    — OpenCode's title agent, Claude Code's session naming and compaction), or it is Claude Code's
    quota probe (``max_tokens`` ≤ 1 or the single user text ``quota``). Requests that offer tools are
    always main requests. Pass ``side_requests=`` to :class:`ScriptedModel` to replace it.
    """
    if not request.is_model_request or request.tool_names:
        return False
    if _SIDE_SYSTEM.search(request.system_text):
        return True
    max_tokens = request.json.get("max_tokens") or request.json.get("max_output_tokens")
    if isinstance(max_tokens, int) and max_tokens <= 1:
        return True
    return request.last_user_text.strip().lower() == "quota"


# ---------------------------------------------------------------------------------------------
# normalization
# ---------------------------------------------------------------------------------------------


def _texts(content: Any) -> list[str]:
    """Text strings from a string or a list of content blocks (any API's text block types)."""
    if isinstance(content, str):
        return [content]
    out: list[str] = []
    if isinstance(content, list):
        for block in cast(list[Any], content):
            if isinstance(block, str):
                out.append(block)
            elif isinstance(block, dict):
                b = cast(dict[str, Any], block)
                if b.get("type") in ("text", "input_text", "output_text") and isinstance(b.get("text"), str):
                    out.append(b["text"])
    return out


def _tool_names(tools: Any) -> list[str]:
    names: list[str] = []
    if not isinstance(tools, list):
        return names
    for tool in cast(list[Any], tools):
        if not isinstance(tool, dict):
            continue
        t = cast(dict[str, Any], tool)
        if t.get("type") == "namespace":  # a group of tools (Codex code mode): list its members
            names.extend(_tool_names(t.get("tools")))
            continue
        fn = t.get("function")
        name = cast(dict[str, Any], fn).get("name") if isinstance(fn, dict) else t.get("name")
        if isinstance(name, str):
            names.append(name)
        elif isinstance(t.get("type"), str):
            names.append(t["type"])  # e.g. Responses built-ins like local_shell, web_search
    return names


def _dump(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, sort_keys=True)


def _normalize(api: ApiKind, body: Mapping[str, Any]) -> list[Message]:
    if api == "anthropic":
        return [_anthropic_message(m) for m in _dicts(body.get("messages"))]
    if api == "chat":
        return [_chat_message(m) for m in _dicts(body.get("messages"))]
    if api == "responses":
        raw = body.get("input")
        if isinstance(raw, str):
            return [Message("user", (raw,))]
        return [_responses_item(i) for i in _dicts(raw)]
    return []


def _dicts(value: Any) -> list[dict[str, Any]]:
    if not isinstance(value, list):
        return []
    return [cast(dict[str, Any], v) for v in cast(list[Any], value) if isinstance(v, dict)]


def _anthropic_message(m: dict[str, Any]) -> Message:
    role = str(m.get("role", "user"))
    content = m.get("content")
    texts = _texts(content)
    calls: list[tuple[str, str]] = []
    results: list[str] = []
    for block in _dicts(content):
        if block.get("type") == "tool_use":
            calls.append((str(block.get("name")), _dump(block.get("input", {}))))
        elif block.get("type") == "tool_result":
            inner = block.get("content")
            results.append("\n".join(_texts(inner)) if isinstance(inner, list) else _dump(inner or ""))
    return Message(role, tuple(texts), tuple(calls), tuple(results))


def _chat_message(m: dict[str, Any]) -> Message:
    role = str(m.get("role", "user"))
    role = "system" if role == "developer" else role
    if role == "tool":
        return Message("tool", (), (), ("\n".join(_texts(m.get("content"))),))
    calls = tuple(
        (
            str(cast(dict[str, Any], c.get("function") or {}).get("name")),
            str(cast(dict[str, Any], c.get("function") or {}).get("arguments", "")),
        )
        for c in _dicts(m.get("tool_calls"))
    )
    return Message(role, tuple(_texts(m.get("content"))), calls)


def _responses_item(item: dict[str, Any]) -> Message:
    kind = item.get("type", "message")
    if kind == "message":
        role = str(item.get("role", "user"))
        role = "system" if role == "developer" else role
        return Message(role, tuple(_texts(item.get("content"))))
    if kind in ("function_call", "custom_tool_call", "local_shell_call"):
        args = item.get("arguments", item.get("input", item.get("action", "")))
        return Message("assistant", (), ((str(item.get("name", kind)), _dump(args)),))
    if str(kind).endswith("_output"):
        output = item.get("output")
        text = "\n".join(_texts(output)) if isinstance(output, list) else _dump(output or "")
        return Message("tool", (), (), (text,))
    return Message("other")
