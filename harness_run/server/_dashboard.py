"""The web dashboard: one static page, one hand-written script and one stylesheet (package data in
``static/``), served at ``/`` without a key. The page holds no data: it asks for the API key and
calls the same authenticated routes as any client (``fetch`` with ``Authorization: Bearer``; the
event stream too, read from the response body, since ``EventSource`` cannot send headers)."""

from __future__ import annotations

import functools
from importlib import resources

from aiohttp import web

__all__ = ["DASHBOARD_PATHS", "add_dashboard"]

CSP = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; "
    "font-src 'none'; object-src 'none'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
)
"""The page's Content-Security-Policy: nothing but our own files, no inline script or style."""

_FILES = {
    "/": ("index.html", "text/html"),
    "/static/dashboard.js": ("dashboard.js", "text/javascript"),
    "/static/dashboard.css": ("dashboard.css", "text/css"),
    "/static/favicon.svg": ("favicon.svg", "image/svg+xml"),
}

DASHBOARD_PATHS = frozenset(_FILES)
"""The dashboard's paths: served without a key (they hold no data)."""

_HEADERS = {
    "Content-Security-Policy": CSP,
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-cache",
}


@functools.cache
def _read(name: str) -> bytes:
    return (resources.files(__package__ or "harness_run.server") / "static" / name).read_bytes()


async def _file(request: web.Request) -> web.Response:
    name, content_type = _FILES[request.path]
    return web.Response(body=_read(name), content_type=content_type, charset="utf-8", headers=_HEADERS)


def add_dashboard(app: web.Application) -> None:
    """Serve the dashboard's files on ``app`` (GET and HEAD)."""
    for path in _FILES:
        app.router.add_get(path, _file)
