"""Model endpoints and credentials a caller of the team server names: which variables are which, and
which endpoints are on the server's own network.

The names come from the project's own list of model-provider variables
(:data:`~harness_run.vocab.envrules.PROVIDER_VARIABLES`), classified by rule, so a variable added
there is classified here too (a test checks every one is):

- an **endpoint** variable is any name ending in ``_BASE_URL`` (and OpenCode's provider-URL
  variables): it says where the model requests, and their key, go;
- a **Vertex** variable switches Claude Code to Vertex AI or names its project, region or Google
  credentials (``CLAUDE_CODE_USE_VERTEX``, ``ANTHROPIC_VERTEX_*``, ``CLOUD_ML_*``, ``VERTEX_*``,
  ``GOOGLE_APPLICATION_CREDENTIALS``, ``GOOGLE_CLOUD_*``, ``CLOUDSDK_*``): with them the model proxy
  mints Google access tokens from the server's credentials;
- a **key** variable is a provider variable ending in ``_API_KEY`` or ``_TOKEN``.

An endpoint is **private** when its host is a literal address that is not globally routable
(loopback, RFC 1918, link-local — the metadata server 169.254.169.254 —, CGNAT, unique-local IPv6,
IPv4-mapped forms of those, and the numeric spellings ``inet_aton`` accepts such as ``2130706433``),
a name for the local machine or a private network (``localhost``, ``*.localhost``, ``*.local``,
``*.internal`` — ``metadata.google.internal`` —, ``*.lan``, ``*.home.arpa``, ``*.svc``, …), a
single-label name (resolved through the server's search domains: ``metadata`` on GCE), or a name
that spells a private address for a wildcard-DNS service (``10.0.0.1.nip.io``,
``169-254-169-254.sslip.io``). Other names are **not resolved** here (no DNS look-up from a
request): a public name whose DNS answers with a private address is not caught by this check; the
agent's egress rules and the server's network are the defence there.
"""

from __future__ import annotations

import ipaddress
import re
import socket
from typing import Final
from urllib.parse import urlsplit

from harness_run.vocab.envrules import OPENCODE_PROVIDER_URL, PROVIDER_VARIABLES

__all__ = [
    "GOOGLE_CREDENTIALS",
    "KEY_VARIABLES",
    "endpoint_problem",
    "is_endpoint_variable",
    "is_vertex_variable",
    "vertex_through_proxy",
]

GOOGLE_CREDENTIALS: Final = "GOOGLE_APPLICATION_CREDENTIALS"
KEY_VARIABLES: Final[frozenset[str]] = frozenset(
    v for v in PROVIDER_VARIABLES if v.endswith(("_API_KEY", "_TOKEN"))
)
"""The model keys the server fills from its own environment when a run does not pass them."""

_ENDPOINT_EXTRA: Final = frozenset(OPENCODE_PROVIDER_URL.values())
_VERTEX_PREFIXES: Final = ("CLOUD_ML_", "VERTEX_", "GOOGLE_CLOUD_", "CLOUDSDK_")
_TRUE: Final = frozenset({"1", "true", "yes", "on"})
_PRIVATE_SUFFIXES: Final = (
    ".localhost",
    ".local",
    ".localdomain",
    ".internal",
    ".intranet",
    ".lan",
    ".home.arpa",
    ".corp",
    ".svc",
)
_EMBEDDED_V4: Final = re.compile(
    r"(?<![0-9])([0-9]{1,3})[.-]([0-9]{1,3})[.-]([0-9]{1,3})[.-]([0-9]{1,3})(?![0-9])"
)
_NUMERIC_V4: Final = re.compile(r"^(0x[0-9a-f]+|[0-9]+)(\.(0x[0-9a-f]+|[0-9]+)){0,3}$")


def is_endpoint_variable(name: str) -> bool:
    """A variable that names where model requests (and their key) go."""
    return name.endswith("_BASE_URL") or name in _ENDPOINT_EXTRA


def is_vertex_variable(name: str) -> bool:
    """A variable that switches to Vertex AI or names its project, region or Google credentials."""
    return "VERTEX" in name or name == GOOGLE_CREDENTIALS or name.startswith(_VERTEX_PREFIXES)


def vertex_through_proxy(env: dict[str, str]) -> bool:
    """Claude Code on Vertex AI with the Google credentials held by the server's model proxy (not
    behind the caller's own gateway, ``CLAUDE_CODE_SKIP_VERTEX_AUTH``)."""

    def on(name: str) -> bool:
        return env.get(name, "").strip().lower() in _TRUE

    return on("CLAUDE_CODE_USE_VERTEX") and not on("CLAUDE_CODE_SKIP_VERTEX_AUTH")


def endpoint_problem(url: str, *, private_ok: bool) -> tuple[str, bool] | None:
    """Why ``url`` may not be a caller's model endpoint, and whether only because it is on the
    server's own network (see the module docs; never when ``private_ok``); None: it may be."""
    try:
        parts = urlsplit(url.strip())
        host = (parts.hostname or "").rstrip(".")
        parts.port  # noqa: B018 -- raises ValueError for a bad port
    except ValueError:
        return "is not a valid URL", False
    if parts.scheme not in ("http", "https") or not host:
        return "is not an http(s) URL with a host", False
    if parts.username is not None or parts.password is not None:
        return "holds credentials in the URL (pass the key as a secret instead)", False
    reason = None if private_ok else _private_host(host)
    return (f"is on the server's own network ({reason})", True) if reason else None


def _private_host(host: str) -> str | None:
    address = _literal_address(host)
    if address is not None:
        return None if _global(address) else f"{address} is not a public address"
    if host == "localhost" or host.endswith(_PRIVATE_SUFFIXES):
        return f"{host!r} names this machine or a private network"
    if "." not in host:
        return f"the single-label name {host!r} resolves through the server's search domains"
    for match in _EMBEDDED_V4.finditer(host):
        octets = [int(g) for g in match.groups()]
        if all(o <= 255 for o in octets):
            embedded = ipaddress.IPv4Address(".".join(map(str, octets)))
            if not _global(embedded):
                return f"{host!r} spells the private address {embedded} (wildcard DNS)"
    return None


def _literal_address(host: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    """The address ``host`` is, in any spelling the resolver accepts (``0x7f.1``, ``2130706433``)."""
    try:
        return ipaddress.ip_address(host)
    except ValueError:
        pass
    if _NUMERIC_V4.match(host):
        try:
            return ipaddress.IPv4Address(socket.inet_aton(host))
        except OSError:
            return None
    return None


def _global(address: ipaddress.IPv4Address | ipaddress.IPv6Address) -> bool:
    if isinstance(address, ipaddress.IPv6Address):
        embedded = address.ipv4_mapped or address.sixtofour or (address.teredo or (None, None))[1]
        if embedded is not None and not _global(embedded):
            return False
    return address.is_global and not address.is_multicast
