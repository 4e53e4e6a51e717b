"""Untrusted text made safe for a terminal: what the agent, a tool, a server or a stored record says
is written with its control characters removed, so none of it acts as an escape sequence (an OSC 52
clipboard write, a cleared screen, an OSC 8 link whose text lies about its target, a moved cursor).

Removing the characters themselves (not parsing sequences) is also right for text that comes in
pieces: an ESC at the end of one streamed delta cannot join the ``]52;...`` at the start of the next.
"""

from __future__ import annotations

__all__ = ["json_line", "safe"]

_CONTROLS: dict[int, None] = {
    code: None for code in (*range(0x20), 0x7F, *range(0x80, 0xA0)) if chr(code) not in "\n\t"
}
"""C0 (but newline and tab), DEL and C1 — C1 too: a terminal may take U+009B alone as a CSI."""

_C1_ESCAPED = {code: f"\\u{code:04x}" for code in range(0x80, 0xA0)}


def safe(text: str) -> str:
    """``text`` without control characters (newline and tab kept)."""
    return text.translate(_CONTROLS)


def json_line(text: str) -> str:
    """A JSON document with its C1 characters written as ``\\uXXXX`` escapes (the same JSON; JSON
    escapes C0 itself): safe to print on a terminal. Raw C1 can only occur inside JSON strings."""
    return text.translate(_C1_ESCAPED)
