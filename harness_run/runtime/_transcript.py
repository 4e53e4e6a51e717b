"""``session.transcript()``: the conversation as the harness recorded it (its native session files,
from the session's checkpoint) and a portable rendering of the stored events (Markdown / JSON)."""

from __future__ import annotations

import io
import json
import tarfile
from dataclasses import dataclass, field
from typing import Any, Literal

from harness_run.events import (
    AgentEvent,
    ErrorEvent,
    MessageEvent,
    ResultEvent,
    ToolResultEvent,
    ToolUseEvent,
    UserEvent,
)
from harness_run.store import HistoryStore, SessionRecord

__all__ = ["Transcript", "TranscriptEntry", "load_transcript", "transcript_of"]

Role = Literal["user", "assistant", "tool_use", "tool_result", "error", "result"]
_CLIP = 4000


@dataclass(frozen=True, slots=True)
class TranscriptEntry:
    """One line of the conversation: who said what in which turn (``name``: the tool's)."""

    turn: int
    role: Role
    text: str
    name: str | None = None


@dataclass(frozen=True, slots=True)
class Transcript:
    """A session's conversation. ``entries`` come from the stored events (every runtime);
    ``native`` maps each native session file of the harness (path relative to its folder) to its
    content as of the latest checkpoint — secret values blanked; empty without ``checkpoint``."""

    session_id: str
    harness: str
    entries: tuple[TranscriptEntry, ...]
    native: dict[str, bytes] = field(default_factory=dict[str, bytes])

    def to_json(self) -> dict[str, Any]:
        return {
            "session_id": self.session_id,
            "harness": self.harness,
            "entries": [
                {"turn": e.turn, "role": e.role, "text": e.text, **({"name": e.name} if e.name else {})}
                for e in self.entries
            ],
            "native_files": sorted(self.native),
        }

    def to_markdown(self) -> str:
        lines = [f"# Session {self.session_id} ({self.harness})"]
        turn = 0
        for entry in self.entries:
            if entry.turn != turn:
                turn = entry.turn
                lines.append(f"\n## Turn {turn}")
            lines.append("")
            lines.append(_markdown(entry))
        return "\n".join(lines) + "\n"


def _markdown(entry: TranscriptEntry) -> str:
    match entry.role:
        case "user":
            return f"**User:** {entry.text}"
        case "assistant":
            return f"**Assistant:** {entry.text}"
        case "tool_use":
            return f"**Tool `{entry.name}`:**\n\n```json\n{entry.text}\n```"
        case "tool_result":
            return f"**Tool result:**\n\n```\n{entry.text}\n```"
        case "error":
            return f"**Error:** {entry.text}"
        case "result":
            return f"*{entry.text}*"


def _entry(event: AgentEvent) -> TranscriptEntry | None:
    turn = event.turn
    match event:
        case UserEvent():
            return TranscriptEntry(turn, "user", event.text)
        case MessageEvent():
            return TranscriptEntry(turn, "assistant", event.text)
        case ToolUseEvent():
            return TranscriptEntry(turn, "tool_use", json.dumps(event.input, indent=1)[:_CLIP], event.name)
        case ToolResultEvent():
            return TranscriptEntry(turn, "tool_result", event.content[:_CLIP])
        case ErrorEvent():
            return TranscriptEntry(turn, "error", event.message)
        case ResultEvent():
            r = event.result
            state = f"error: {r.error}" if r.is_error else r.stop_reason
            commit = f", commit {r.commit_sha[:12]}" if r.commit_sha else ""
            return TranscriptEntry(turn, "result", f"turn {turn} ended ({state}{commit})")
        case _:
            return None


def load_transcript(store: HistoryStore, record: SessionRecord) -> Transcript:
    """The transcript of ``record``'s session from ``store``."""
    key = record.snapshot.native if record.snapshot is not None else None
    return transcript_of(record, store.read_events(record.session_id), store.get_blob(key) if key else None)


def transcript_of(record: SessionRecord, events: list[AgentEvent], data: bytes | None = None) -> Transcript:
    """The transcript of ``record``'s session from its stored ``events`` and its native files (the
    checkpoint's tar.gz, ``data``; none without it)."""
    entries = [e for e in map(_entry, events) if e is not None]
    native: dict[str, bytes] = {}
    if data is not None:
        with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
            for member in tar.getmembers():
                handle = tar.extractfile(member) if member.isfile() else None
                if handle is not None:
                    native[member.name] = handle.read()
    return Transcript(record.session_id, record.harness, tuple(entries), native)
