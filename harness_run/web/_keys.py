"""The kit's request keys, made on import (aiohttp names a key by the module that makes it): this
module is imported when a request is served, never by importing the kit."""

from __future__ import annotations

from aiohttp import web

__all__ = ["SECRETS"]

SECRETS: web.RequestKey[list[str]] = web.RequestKey("secrets", list[str])
"""The secret values of the request's body (``request[SECRETS]``), redacted from what it answers."""
