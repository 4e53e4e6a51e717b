"""Plain-HTTP helpers for the scripted model tests (urllib only, like a user's CI would)."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Any


def post(
    url: str, body: dict[str, Any], headers: dict[str, str] | None = None
) -> tuple[int, dict[str, str], bytes]:
    """POST JSON; returns (status, lower-cased headers, raw body) for success and HTTP errors alike."""
    data = json.dumps(body).encode()
    req = urllib.request.Request(
        url, data=data, method="POST", headers={"content-type": "application/json", **(headers or {})}
    )
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return resp.status, {k.lower(): v for k, v in resp.headers.items()}, resp.read()
    except urllib.error.HTTPError as exc:
        return exc.code, {k.lower(): v for k, v in exc.headers.items()}, exc.read()


def get(url: str) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=10) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def sse_events(raw: bytes) -> list[tuple[str | None, Any]]:
    """Parse an SSE body into (event name, JSON data or the literal string) pairs."""
    events: list[tuple[str | None, Any]] = []
    for block in raw.decode().split("\n\n"):
        if not block.strip():
            continue
        name: str | None = None
        data = ""
        for line in block.splitlines():
            if line.startswith("event: "):
                name = line[len("event: ") :]
            elif line.startswith("data: "):
                data += line[len("data: ") :]
        try:
            events.append((name, json.loads(data)))
        except ValueError:
            events.append((name, data))
    return events
