"""Redacting text that arrives in pieces: a secret split across two streamed deltas is blanked too."""

from __future__ import annotations

from collections.abc import Sequence

from harness_run.events import AgentEvent, DeltaEvent
from harness_run.security._secrets import SHORT_SECRET, redact_event, redact_text

__all__ = ["DeltaRedactor", "EventRedactor"]


class DeltaRedactor:
    """Redacts one text stream piece by piece (:meth:`feed`), holding back as little as it can.

    A piece is passed on except for its tail that could still be the start of a secret form (at most
    the longest form's length minus one characters; a whole short form too, since the character after
    it decides whether it is a word of its own, see :func:`redact_text`). A form completed by a later
    piece is then blanked whole. :meth:`flush` ends the stream (the message is complete) and returns
    what was held, redacted. The pieces passed on, joined, equal ``redact_text`` of the whole text
    (short forms: at worst blanked where the whole text would not be, never the other way round)."""

    def __init__(self, forms: Sequence[str]) -> None:
        self._forms = [f for f in forms if f]
        self._held = ""
        self._left = ""
        """The last character passed on: the left context of a short form at the next piece's start."""

    def feed(self, text: str) -> str:
        """What of ``text`` (after what was held) can be passed on now, redacted."""
        if not self._forms:
            return text
        buffer = self._held + text
        cut = len(buffer) - self._tail(buffer)
        cut = self._past_whole_forms(buffer, cut)
        self._held = buffer[cut:]
        return self._redact(buffer[:cut], self._held[:1])

    def flush(self) -> str:
        """Everything still held, redacted; the redactor starts afresh."""
        held, self._held = self._held, ""
        out = self._redact(held, "")
        self._left = ""
        return out

    def _tail(self, buffer: str) -> int:
        """The length of the longest suffix of ``buffer`` that may begin a secret form."""
        longest = 0
        for form in self._forms:
            short = len(form) < SHORT_SECRET
            # a proper prefix of any form; the whole form for short ones (the next character decides)
            top = min(len(form) if short else len(form) - 1, len(buffer))
            for size in range(top, longest, -1):
                if buffer.endswith(form[:size]):
                    longest = size
                    break
        return longest

    def _past_whole_forms(self, buffer: str, cut: int) -> int:
        """``cut`` moved past any whole form that straddles it (it is blanked in this piece)."""
        moved = True
        while moved:
            moved = False
            for form in self._forms:
                start = buffer.find(form, max(0, cut - len(form) + 1))
                if 0 <= start < cut < start + len(form):
                    cut, moved = start + len(form), True
        return cut

    def _redact(self, text: str, right: str) -> str:
        """``text`` redacted with its neighbours as context (they are never part of a whole form)."""
        if not text:
            return ""
        left = self._left
        full = redact_text(left + text + right, self._forms)
        out = full[len(left) : len(full) - len(right)]
        self._left = out[-1:]  # as redacted: a short form right after a blanked one is blanked too
        return out


class EventRedactor:
    """A turn's events redacted in order (:func:`redact_event`), with its text deltas through a
    :class:`DeltaRedactor` per message: what a delta held back is passed on (as one more delta)
    before the next message's first delta or any other event, so the deltas of a message, joined,
    are its text as the ``message`` event that follows has it."""

    def __init__(self, forms: Sequence[str]) -> None:
        self._forms = forms
        self._deltas = DeltaRedactor(forms)
        self._message: tuple[str | None] | None = None
        """The message id of the deltas held (a 1-tuple: None is an id too), None when none are."""

    def redact(self, event: AgentEvent) -> list[AgentEvent]:
        """The events to pass on for ``event`` (none while a delta's text is all held back)."""
        out: list[AgentEvent] = []
        if isinstance(event, DeltaEvent):
            if self._message is not None and self._message != (event.message_id,):
                out += self._flush()
            self._message = (event.message_id,)
            text = self._deltas.feed(event.text)
            if text:
                out.append(event.model_copy(update={"text": text}))
            return out
        out += self._flush()
        out.append(redact_event(event, self._forms))
        return out

    def _flush(self) -> list[AgentEvent]:
        message, self._message = self._message, None
        text = self._deltas.flush()
        return [DeltaEvent(text=text, message_id=message[0])] if message is not None and text else []
