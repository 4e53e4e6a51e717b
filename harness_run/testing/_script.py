"""The script: ordered replies plus standing rules, and how a request picks its reply.

Semantics (for every *main* model request — side requests never touch the script):

1. **Rules first.** Every :class:`Rule` in the script, wherever it was placed, is checked in the order
   added; the first whose conditions all hold answers the request. A rule is not consumed unless it
   has ``times`` (then it stops matching after that many answers).
2. **Then the queue.** Otherwise the next unconsumed ordered :class:`Reply` answers and is consumed.
3. **Then exhaustion.** With nothing left the request gets the text :data:`EXHAUSTED_TEXT` and
   ``ScriptedModel.exhausted`` becomes true — the client finishes its turn instead of hanging.

A rule's conditions: ``match`` (a substring of the last user text, or a predicate over the
:class:`RecordedRequest`), ``contains`` (a substring of any message text) and ``tool_result``
(``False``, the default: only fresh prompts, i.e. the conversation does not end with a tool result;
``True``: only the request that reports back after a tool ran; ``None``: either).
"""

from __future__ import annotations

import dataclasses
import threading
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from harness_run.testing._replies import Reply
from harness_run.testing._requests import Outcome, RecordedRequest

__all__ = ["EXHAUSTED_TEXT", "Matcher", "Rule", "Script", "ScriptItem"]

EXHAUSTED_TEXT = "[scripted model: script exhausted]"

Matcher = str | Callable[[RecordedRequest], bool] | None


@dataclass
class Rule:
    """Answer every request that meets the conditions with ``reply`` (see the module docstring).

    Args:
        match: substring of :attr:`RecordedRequest.last_user_text` (case-sensitive), or a predicate
            ``request -> bool``; ``None`` matches any request.
        reply: the reply to send.
        contains: substring that must occur in :attr:`RecordedRequest.text` (all message text).
        tool_result: ``False`` only fresh prompts (default), ``True`` only tool continuations,
            ``None`` both.
        times: answer at most this many requests (``None`` = unlimited).
    """

    match: Matcher = None
    reply: Reply = field(default_factory=lambda: Reply.text(""))
    contains: str | None = None
    tool_result: bool | None = False
    times: int | None = None
    used: int = field(default=0, init=False)

    def __post_init__(self) -> None:
        if not isinstance(self.reply, Reply):  # pyright: ignore[reportUnnecessaryIsInstance]
            raise TypeError(f"Rule.reply must be a Reply, got {type(self.reply).__name__}")
        if self.times is not None and self.times < 1:
            raise ValueError(f"Rule.times must be >= 1 or None, got {self.times!r}")

    def matches(self, request: RecordedRequest) -> bool:
        """Whether this rule (if not used up) answers ``request``."""
        if self.times is not None and self.used >= self.times:
            return False
        if self.tool_result is not None and request.has_tool_result != self.tool_result:
            return False
        if self.contains is not None and self.contains not in request.text:
            return False
        if self.match is None:
            return True
        if isinstance(self.match, str):
            return self.match in request.last_user_text
        return bool(self.match(request))


ScriptItem = Reply | Rule


class Script:
    """A thread-safe queue of replies plus rules."""

    def __init__(self, items: Iterable[ScriptItem] = ()) -> None:
        self._lock = threading.Lock()
        self._queue: deque[Reply] = deque()
        self._rules: list[Rule] = []
        self._exhausted = 0
        self.add(*items)

    def add(self, *items: ScriptItem | Iterable[ScriptItem]) -> None:
        """Append replies to the queue and rules to the rule list (nested iterables are flattened)."""
        with self._lock:
            for item in items:
                if isinstance(item, Reply):
                    self._queue.append(item)
                elif isinstance(item, Rule):
                    self._rules.append(dataclasses.replace(item))  # own copy: `used` is per script
                elif isinstance(item, (str, bytes)):
                    raise TypeError(
                        f"script items are Reply or Rule objects; got a string {item!r}: use text(...)"
                    )
                else:
                    self._add_nested(item)

    def _add_nested(self, items: Iterable[ScriptItem]) -> None:
        for sub in items:
            if isinstance(sub, Reply):
                self._queue.append(sub)
            elif isinstance(sub, Rule):  # pyright: ignore[reportUnnecessaryIsInstance]
                self._rules.append(dataclasses.replace(sub))
            else:
                raise TypeError(f"script items are Reply or Rule objects, got {type(sub).__name__}")

    def next_reply(self, request: RecordedRequest) -> tuple[Reply, Outcome, int | None]:
        """Pick (and consume) the reply for a main request: ``(reply, outcome, rule index)``."""
        with self._lock:
            for index, rule in enumerate(self._rules):
                if rule.matches(request):
                    rule.used += 1
                    return rule.reply, "rule", index
            if self._queue:
                return self._queue.popleft(), "script", None
            self._exhausted += 1
            return Reply.text(EXHAUSTED_TEXT), "exhausted", None

    @property
    def remaining(self) -> int:
        """Ordered replies not yet consumed."""
        with self._lock:
            return len(self._queue)

    @property
    def rules(self) -> list[Rule]:
        """The standing rules, in match order."""
        with self._lock:
            return list(self._rules)

    @property
    def exhausted_count(self) -> int:
        """How many main requests found the script empty."""
        with self._lock:
            return self._exhausted

    def clear(self) -> None:
        """Drop every reply and rule and reset the exhaustion count."""
        with self._lock:
            self._queue.clear()
            self._rules.clear()
            self._exhausted = 0
