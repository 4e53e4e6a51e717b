"""The model proxy: the harness talks to a loopback proxy that holds the real model key.

One :class:`ModelProxy` per turn. :meth:`ModelProxy.substitute` takes the harness's environment
(built by :func:`~harness_run.security.agent_env`), registers each model endpoint it names with
its real key(s) and gives the harness the proxy's address and a random per-turn token instead;
every other provider key is dropped. The proxy checks the token on each request, swaps it for the
real credential and streams the request and the answer through unchanged (no decompression, no
re-framing: server-sent events pass as they arrive). The token is worthless once the turn ends and
anywhere but this proxy.

Claude Code on Vertex AI (``CLAUDE_CODE_USE_VERTEX``) reaches the proxy the same way: it gets
``ANTHROPIC_VERTEX_BASE_URL`` with the turn token as the first path segment and
``CLAUDE_CODE_SKIP_VERTEX_AUTH=1``; the proxy holds the Google credentials (Application Default
Credentials, or the run's ``GOOGLE_APPLICATION_CREDENTIALS`` file) and adds a fresh OAuth access token
to each request, so the harness never sees a Google credential.

The listening socket is bound when the proxy is made (so the port is known before the harness is
spawned); aiohttp (imported in a thread, ~0.4 s the first time) starts serving while the CLI starts
up — connections wait in the backlog meanwhile.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import importlib
import logging
import os
import secrets
import socket
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final, cast
from urllib.parse import urlsplit

from harness_run import telemetry
from harness_run.errors import UsageError
from harness_run.events import Usage
from harness_run.security._meter import WireMeter
from harness_run.vocab.envrules import OPENCODE_PROVIDER_URL

if TYPE_CHECKING:
    from aiohttp import ClientSession, web
    from multidict import CIMultiDictProxy

__all__ = ["PROXY_ENV", "ModelProxy", "inline_google_credentials", "proxy_enabled"]

_log = logging.getLogger("harness_run.security")

PROXY_ENV: Final = "HARNESS_RUN_MODEL_PROXY"
"""``0`` turns the proxy off (the harness then gets the real key in its environment, as before)."""

_KEY_VARS: Final = (
    "ANTHROPIC_API_KEY",
    "CLAUDE_CODE_OAUTH_TOKEN",
    "ANTHROPIC_AUTH_TOKEN",
    "OPENAI_API_KEY",
    "CODEX_API_KEY",
    "OPENROUTER_API_KEY",
)
_DEFAULT_UPSTREAM: Final = {
    "ANTHROPIC_BASE_URL": "https://api.anthropic.com",
    "OPENAI_BASE_URL": "https://api.openai.com/v1",
}
# header each key variable authenticates with
_HEADER: Final = {
    "ANTHROPIC_API_KEY": "x-api-key",
    "CLAUDE_CODE_OAUTH_TOKEN": "authorization",  # a Claude subscription's token, sent as a bearer
    "ANTHROPIC_AUTH_TOKEN": "authorization",
    "OPENAI_API_KEY": "authorization",
}
_CLAUDE_VARS: Final = frozenset({"ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN", "CLAUDE_CODE_OAUTH_TOKEN"})
_GOOGLE_SCOPES: Final = ("https://www.googleapis.com/auth/cloud-platform",)
_TRUE: Final = frozenset({"1", "true", "yes", "on"})
_GOOGLE_CREDENTIALS: Final = "GOOGLE_APPLICATION_CREDENTIALS"
_HOP: Final = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "proxy-connection",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
        "host",
        "content-length",
        "accept-encoding",
    }
)


def proxy_enabled() -> bool:
    return os.environ.get(PROXY_ENV, "1") != "0"


_Headers = tuple[tuple[str, str], ...]
_Verdict = Callable[[str, bytes], Awaitable[tuple[int, dict[str, Any]]]]
"""The guard's answer to a tool call posted with a token: (HTTP status, JSON body)."""


@dataclass(frozen=True, slots=True)
class _Route:
    origin: str
    """scheme://host[:port] of the real endpoint."""
    headers: tuple[tuple[str, str], ...]
    """The real credential headers (name, value)."""
    google: _GoogleToken | None = None
    """Vertex AI: the Google credentials whose access token each request gets."""


class _GoogleToken:
    """Google credentials held by the proxy (never the harness): an access token, refreshed when
    it expires. ``credentials_file``: the run's ``GOOGLE_APPLICATION_CREDENTIALS``; else ADC."""

    def __init__(self, credentials_file: str | None) -> None:
        self._file = credentials_file
        self._credentials: Any = None
        self._lock = asyncio.Lock()

    async def header(self) -> tuple[str, str]:
        async with self._lock:
            if self._credentials is None or not self._credentials.valid:
                await asyncio.to_thread(self._refresh)
            credentials: Any = self._credentials
        return ("authorization", f"Bearer {credentials.token}")

    def _refresh(self) -> None:
        try:
            auth: Any = importlib.import_module("google.auth")
            transport: Any = importlib.import_module("google.auth.transport.requests")
        except ImportError as exc:
            raise _ProxyRefusal(
                f"Vertex AI through the model proxy needs google-auth ({exc}); "
                "pip install 'harness-run[sandbox]'"
            ) from None
        try:
            if self._credentials is None:
                if self._file and self._file != os.environ.get(_GOOGLE_CREDENTIALS):
                    self._credentials = _credentials_file(self._file)
                else:
                    self._credentials = auth.default(scopes=_GOOGLE_SCOPES)[0]
            credentials: Any = self._credentials
            credentials.refresh(transport.Request())
        except Exception as exc:  # google-auth's errors: no credentials, a refused refresh, no network
            self._credentials = None
            raise _ProxyRefusal(
                f"no Google credentials for Vertex AI ({type(exc).__name__}): set "
                "GOOGLE_APPLICATION_CREDENTIALS, run `gcloud auth application-default login`, or run "
                "on GKE with Workload Identity"
            ) from None


_MAX_CREDENTIALS_FILE: Final = 64 * 1024


def inline_google_credentials(harness: str, secrets: Mapping[str, str]) -> dict[str, str]:
    """The run's secrets as a worker on another machine needs them: when the worker's proxy is to
    hold the Google credentials of a Claude Code run on Vertex AI, the run's
    ``GOOGLE_APPLICATION_CREDENTIALS`` names a key file on *this* machine, which a container or a pod
    cannot open, so its content takes the path's place (:func:`_credentials_file` reads either). A
    path that is not a readable file here (one in the image or the pod) is left as it is, and so is
    every other run's. Raises UsageError for a file over 64 KiB (no key file is)."""
    path = secrets.get(_GOOGLE_CREDENTIALS, "")
    if not path or path.lstrip().startswith("{") or not _vertex_through_proxy(harness, secrets):
        return dict(secrets)
    try:
        with open(path, "rb") as handle:
            content = handle.read(_MAX_CREDENTIALS_FILE + 1)
    except OSError:
        return dict(secrets)
    if len(content) > _MAX_CREDENTIALS_FILE:
        raise UsageError(
            f"the run's {_GOOGLE_CREDENTIALS} file is over {_MAX_CREDENTIALS_FILE // 1024} KiB; "
            "name a service-account key or an authorized-user file"
        )
    return {**secrets, _GOOGLE_CREDENTIALS: content.decode("utf-8", errors="replace")}


def _vertex_through_proxy(harness: str, env: Mapping[str, str]) -> bool:
    """A Claude Code run on Vertex AI whose Google credentials the proxy holds (not behind the
    caller's own gateway)."""
    return (
        harness == "claude-code"
        and _on(env, "CLAUDE_CODE_USE_VERTEX")
        and not _on(env, "CLAUDE_CODE_SKIP_VERTEX_AUTH")
    )


def _credentials_file(path: str) -> Any:
    """A run's own credentials file — a service-account key or an authorized-user file (the kinds
    that hold what they need; others — external accounts — come through ADC) — named by its path,
    or its content (a worker on another machine gets the content: ``inline_google_credentials``)."""
    import json

    if path.lstrip().startswith("{"):
        info: Any = json.loads(path)
    else:
        with open(path, encoding="utf-8") as handle:
            info = json.load(handle)
    kind: object = cast("dict[str, object]", info).get("type") if isinstance(info, dict) else None
    if kind == "service_account":
        module: Any = importlib.import_module("google.oauth2.service_account")
        return module.Credentials.from_service_account_info(info, scopes=_GOOGLE_SCOPES)
    if kind == "authorized_user":
        module = importlib.import_module("google.oauth2.credentials")
        return module.Credentials.from_authorized_user_info(info, scopes=_GOOGLE_SCOPES)
    raise ValueError("a run's GOOGLE_APPLICATION_CREDENTIALS must be a service-account or user file")


class _ProxyRefusal(Exception):
    """A request the proxy answers itself with 401 and this message (no secret in it)."""


class ModelProxy:
    """A loopback HTTP proxy for one turn's model requests (see the module docstring)."""

    SERVER_MODULES: Final = ("aiohttp.web",)
    """What serving imports (a spawn-first ``harness-run run`` imports it while the harness boots)."""

    def __init__(
        self, budget: float | None = None, model: str = "", *, sock: socket.socket | None = None
    ) -> None:
        """``sock``: a listening 127.0.0.1 socket to serve on, bound earlier (a harness spawned
        before this proxy existed is already connecting to it; see :meth:`rekey`)."""
        if sock is None:
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.bind(("127.0.0.1", 0))
            sock.listen(128)
        self._sock = sock
        self._sock.setblocking(False)
        self.port: int = self._sock.getsockname()[1]
        self._routes: dict[str, _Route] = {}
        self._names: dict[tuple[tuple[str, ...], bool], str] = {}
        """(header names, Google auth) -> its token: stable while this proxy lives."""
        self._runner: web.AppRunner | None = None
        self._client: ClientSession | None = None
        self.requests = 0
        """Requests forwarded (for tests and benchmarks)."""
        self.refused = 0
        """Requests refused for a missing or wrong token."""
        self.dropped = 0
        """Requests whose endpoint dropped the connection (the harness's was dropped too)."""
        self._starting: asyncio.Task[None] | None = None
        self._mcp: dict[str, _Route] = {}
        """Per-turn token in the path -> a remote MCP server's URL and its secret headers."""
        self._guard: _Verdict | None = None
        """The guard server's verdict for ``/hrg/<token>`` (Claude Code's HTTP guard hook)."""
        self.meter = WireMeter(budget, model)
        self.parent: telemetry.Span = telemetry.NOOP
        """The span each model request's span goes under (the turn's harness span)."""
        """Usage and cost of the answers, read from the wire; the turn's budget."""
        self.on_budget: Callable[[str], Awaitable[None]] | None = None
        self.on_failure: Callable[[str], Awaitable[None]] | None = None
        """Called (with the reason) when the proxy cannot start serving: stops the turn."""
        self._failing: asyncio.Future[None] | None = None
        """Called (with the reason) when a request is refused for the budget: stops the turn."""
        self.over_budget = 0
        """Requests refused because the turn's cost had reached its budget."""

    @property
    def metering(self) -> bool:
        """True when this turn's model requests go through the proxy (so it meters them)."""
        return bool(self._routes)

    @property
    def tokens(self) -> list[str]:
        """This turn's tokens (redacted like secrets)."""
        return list(self._routes)

    def substitute(self, harness: str, env: dict[str, str]) -> dict[str, str]:
        """``env`` with the model endpoint pointed at this proxy and the real keys replaced by a
        per-turn token; other provider keys are dropped. Unchanged when the turn uses no key we
        can proxy (Vertex AI behind the caller's own gateway)."""
        base_var = "ANTHROPIC_BASE_URL" if harness == "claude-code" else "OPENAI_BASE_URL"
        if _vertex_through_proxy(harness, env):
            return self._vertex(env)
        if harness == "claude-code" and _on(env, "CLAUDE_CODE_USE_VERTEX"):
            return env  # Vertex AI behind the caller's own gateway (CLAUDE_CODE_SKIP_VERTEX_AUTH)
        if harness == "opencode" and not env.get(base_var):
            return self._opencode_builtin(env)
        used = [v for v in _HEADER if env.get(v) and (v in _CLAUDE_VARS) == (harness == "claude-code")]
        if "ANTHROPIC_AUTH_TOKEN" in used and "CLAUDE_CODE_OAUTH_TOKEN" in used:
            used.remove("CLAUDE_CODE_OAUTH_TOKEN")  # one bearer: the gateway token wins
        if not used:
            return env
        upstream = env.get(base_var) or _DEFAULT_UPSTREAM[base_var]
        parts = urlsplit(upstream)
        headers = tuple(
            (_HEADER[v], env[v] if _HEADER[v] == "x-api-key" else f"Bearer {env[v]}") for v in used
        )
        token = self._route(parts.scheme, parts.netloc, headers)
        out = {k: v for k, v in env.items() if k not in _KEY_VARS}
        out[base_var] = f"http://127.0.0.1:{self.port}{parts.path.rstrip('/')}"
        for var in used:
            out[var] = token
        if "ANTHROPIC_AUTH_TOKEN" in used and "ANTHROPIC_API_KEY" not in used and "ANTHROPIC_API_KEY" in env:
            out["ANTHROPIC_API_KEY"] = ""  # as the OpenRouter routing left it
        return out

    def _opencode_builtin(self, env: dict[str, str]) -> dict[str, str]:
        """OpenCode's own ``anthropic``/``openai`` providers (no endpoint variable): each key gets a
        token of its own, and the proxy's address goes to the driver (``OPENCODE_PROVIDER_URL``),
        which writes it into the provider's ``baseURL``."""
        out = dict(env)
        for provider, key_var, header, default in (
            ("anthropic", "ANTHROPIC_API_KEY", "x-api-key", "https://api.anthropic.com/v1"),
            ("openai", "OPENAI_API_KEY", "authorization", "https://api.openai.com/v1"),
        ):
            if not env.get(key_var):
                continue
            given = env.get("ANTHROPIC_BASE_URL") if provider == "anthropic" else None
            parts = urlsplit(f"{given.rstrip('/')}/v1" if given else default)
            value = env[key_var] if header == "x-api-key" else f"Bearer {env[key_var]}"
            token = self._route(parts.scheme, parts.netloc, ((header, value),))
            out[key_var] = token
            out[OPENCODE_PROVIDER_URL[provider]] = f"http://127.0.0.1:{self.port}{parts.path.rstrip('/')}"
        for var in _KEY_VARS:
            if var not in ("ANTHROPIC_API_KEY", "OPENAI_API_KEY"):
                out.pop(var, None)
        return out

    def _vertex(self, env: dict[str, str]) -> dict[str, str]:
        """Claude Code on Vertex AI: the token as the base URL's first path segment (Claude Code sends
        no credential once ``CLAUDE_CODE_SKIP_VERTEX_AUTH`` is set); the proxy adds Google's."""
        region = env.get("CLOUD_ML_REGION", "").strip() or "global"
        host = "aiplatform.googleapis.com" if region == "global" else f"{region}-aiplatform.googleapis.com"
        upstream = env.get("ANTHROPIC_VERTEX_BASE_URL") or f"https://{host}/v1"
        parts = urlsplit(upstream)
        google = _GoogleToken(env.get(_GOOGLE_CREDENTIALS))
        token = self._route(parts.scheme, parts.netloc, (), google)
        out = {k: v for k, v in env.items() if k not in _KEY_VARS and k != _GOOGLE_CREDENTIALS}
        out["ANTHROPIC_VERTEX_BASE_URL"] = f"http://127.0.0.1:{self.port}/{token}{parts.path.rstrip('/')}"
        out["CLAUDE_CODE_SKIP_VERTEX_AUTH"] = "1"
        return out

    def _route(self, scheme: str, netloc: str, headers: _Headers, google: _GoogleToken | None = None) -> str:
        """Register a model endpoint with its credential under a token: the same one for the same
        header names while this proxy lives (a harness kept between turns keeps it)."""
        key = (tuple(name for name, _ in headers), google is not None)
        token = self._names.setdefault(key, "hrp-" + secrets.token_urlsafe(24))
        self._routes[token] = _Route(f"{scheme}://{netloc}", headers, google)
        return token

    def begin_turn(self, budget: float | None, model: str) -> None:
        """A new turn on a proxy kept from an earlier one: its own meter and budget."""
        self.meter = WireMeter(budget, model)
        self.over_budget = 0
        self.on_budget = self.on_failure = None
        self.parent = telemetry.NOOP

    def end_turn(self) -> None:
        """The turn is over, its harness kept: every credential is dropped until :meth:`substitute`."""
        self._routes.clear()
        self._mcp.clear()

    def rekey(self, tokens: Mapping[str, str]) -> None:
        """Each route named by a key of ``tokens`` answers to its value instead (the tokens a harness
        spawned before this proxy existed was given); call before :meth:`start`."""
        self._routes = {tokens.get(token, token): route for token, route in self._routes.items()}
        self._names = {key: tokens.get(token, token) for key, token in self._names.items()}

    def mcp_route(self, url: str, headers: Mapping[str, str]) -> str:
        """The proxy's URL for a remote MCP server: requests to it go to ``url`` with ``headers``
        (the server's secret headers) added; the path carries a per-turn token."""
        token = "hrm-" + secrets.token_urlsafe(24)
        self._mcp[token] = _Route(url.rstrip("/"), tuple(headers.items()))
        return f"http://127.0.0.1:{self.port}/mcp/{token}"

    def guard_route(self, verdict: _Verdict, token: str) -> str:
        """Serve the guard's ``verdict`` (status, JSON answer) for tool calls posted to the URL this
        returns (``token`` in its path, checked by ``verdict``): a hook without a process per call."""
        self._guard = verdict
        return f"http://127.0.0.1:{self.port}/hrg/{token}"

    async def start(self) -> None:
        """Serve (only needed when :meth:`substitute` or :meth:`mcp_route` registered a route)."""
        if self._runner is not None or not (self._routes or self._mcp or self._guard):
            return
        for module in self.SERVER_MODULES:  # ~0.4 s once, off the loop
            await asyncio.to_thread(importlib.import_module, module)
        import aiohttp
        from aiohttp import web

        app = web.Application(client_max_size=64 * 1024**2)
        app.router.add_route("*", "/{tail:.*}", self._handle)
        runner = web.AppRunner(app, access_log=None, handle_signals=False)
        await runner.setup()
        await web.SockSite(runner, self._sock).start()
        self._runner = runner
        # trust_env: through HTTPS_PROXY/HTTP_PROXY like the CLI itself would go (in a container
        # without network: the worker's authenticated way through the host's egress proxy)
        self._client = aiohttp.ClientSession(
            auto_decompress=False,
            timeout=aiohttp.ClientTimeout(total=None, sock_connect=30),
            trust_env=True,
        )

    def start_soon(self) -> None:
        """Start serving in the background: the port is bound already, so the harness can be spawned
        at once (its first requests wait in the backlog until aiohttp is up)."""
        if (self._routes or self._mcp or self._guard) and self._starting is None:
            self._starting = asyncio.ensure_future(self.start())
            self._starting.add_done_callback(self._started)

    def _started(self, task: asyncio.Task[None]) -> None:
        """A proxy that could not start (aiohttp missing or broken) must not leave the harness
        waiting on a socket nobody serves: close it (its connections are refused) and stop the turn."""
        if task.cancelled() or task.exception() is None:
            return
        error = task.exception()
        message = f"the model proxy could not start ({type(error).__name__}: {error}); the turn was stopped"
        _log.error("%s", message)
        self._sock.close()
        if self.on_failure is not None:
            self._failing = asyncio.ensure_future(self.on_failure(message))

    async def aclose(self) -> None:
        if self._starting is not None:
            if not self._starting.done():
                self._starting.cancel()
            with contextlib.suppress(BaseException):
                await self._starting
        self._routes.clear()
        self._mcp.clear()
        self._guard = None
        if self._client is not None:
            await self._client.close()
        if self._runner is not None:
            await self._runner.cleanup()
        self._sock.close()

    def _route_of(self, headers: CIMultiDictProxy[str], path: str) -> tuple[_Route | None, str]:
        """The route a request's token names, and the path to forward (without a path token)."""
        given = headers.get("x-api-key") or ""
        auth = headers.get("authorization") or ""
        if not given and auth.lower().startswith("bearer "):
            given = auth[7:].strip()
        if not given and path.startswith("/hrp-"):  # Vertex AI: /<token>/v1/projects/…
            given, _, rest = path[1:].partition("/")
            path = "/" + rest
            found = self._match(given)
            return (found, path) if found is not None and found.google is not None else (None, path)
        return self._match(given), path

    def _match(self, given: str) -> _Route | None:
        for token, route in self._routes.items():
            if given and hmac.compare_digest(given.encode(), token.encode()):
                return route
        return None

    def _mcp_of(self, path: str) -> tuple[_Route, str] | None:
        """(route, the rest of the path) for ``/mcp/<token>[/rest]``."""
        token, _, rest = path.removeprefix("/mcp/").partition("/")
        for known, route in self._mcp.items():
            if hmac.compare_digest(token.encode(), known.encode()):
                return route, f"/{rest}" if rest else ""
        return None

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        from aiohttp import web

        if request.path.startswith("/hrg/"):  # the guard hook: never forwarded anywhere
            verdict = self._guard
            if verdict is None or request.method != "POST":
                return web.json_response({"error": "harness-run guard: not served here"}, status=404)
            status, answer = await verdict(request.path[5:], await request.read())
            return web.json_response(answer, status=status)
        if request.path.startswith("/mcp/"):
            found = self._mcp_of(request.path)
            if found is None or self._client is None:
                self.refused += 1
                return web.json_response({"error": "harness-run proxy: no valid turn token"}, status=401)
            route, rest = found
            query = f"?{request.query_string}" if request.query_string else ""
            return await self._forward(request, route.origin + rest + query, route.headers, metered=False)
        route, path = self._route_of(request.headers, request.rel_url.raw_path)
        if route is None or self._client is None:
            self.refused += 1
            return _refusal("harness-run model proxy: no valid turn token")
        if self.meter.exhausted():
            return await self._refuse_budget()
        extra = route.headers
        if route.google is not None:
            try:
                extra = (*extra, await route.google.header())
            except _ProxyRefusal as exc:
                self.refused += 1
                return _refusal(f"harness-run model proxy: {exc}")
        self.requests += 1
        query = request.rel_url.raw_query_string
        return await self._forward(request, route.origin + path + (f"?{query}" if query else ""), extra)

    async def _forward(
        self, request: web.Request, url: str, extra: tuple[tuple[str, str], ...], *, metered: bool = True
    ) -> web.StreamResponse:
        """Send ``request`` to ``url`` with the ``extra`` (credential) headers instead of its own and
        stream the answer back (metered: read by :attr:`meter` as it passes)."""
        from aiohttp import web

        assert self._client is not None
        span, before, cost_before = telemetry.NOOP, self.meter.usage, self.meter.cost_usd
        if metered:  # one client span per model request, under the harness's span (no token in it)
            span = telemetry.start_span(
                "harness_run.model_request",
                parent=self.parent,
                kind="client",
                http_method=request.method,
                url_path=urlsplit(url).path,
            )
        replaced = {k.lower() for k, _ in extra} | {"x-api-key", "authorization"}
        headers = [(k, v) for k, v in request.headers.items() if k.lower() not in _HOP | replaced]
        headers += [*extra, ("accept-encoding", "identity")]  # nothing to decompress to meter it
        body = await request.read()
        try:
            async with self._client.request(
                request.method, url, headers=headers, data=body, allow_redirects=False
            ) as upstream:
                answer = web.StreamResponse(status=upstream.status, reason=upstream.reason)
                for key, value in upstream.headers.items():
                    if key.lower() not in _HOP:
                        answer.headers.add(key, value)
                await answer.prepare(request)
                kind = upstream.headers.get("content-type", "")
                meter = self.meter.response(body, kind) if metered else None  # MCP: no model usage
                try:
                    async for chunk in upstream.content.iter_any():
                        if meter is not None:
                            meter.feed(chunk)
                        await answer.write(chunk)
                finally:
                    if meter is not None:
                        meter.close()  # a cut answer counts what it reported
                        after = (self.meter.usage, self.meter.cost_usd)
                        _measured(span, upstream.status, (before, cost_before), after)
                await answer.write_eof()
                return answer
        except (TimeoutError, OSError, _client_errors()):
            span.fail("the model endpoint dropped the connection")
            # The endpoint dropped the connection (before or during its answer): drop the harness's
            # too, so it sees what it would have seen talking to the endpoint itself (its own
            # "connection dropped" handling and retries), not a 500 made up here.
            self.dropped += 1
            if request.transport is not None:
                request.transport.abort()
            return web.Response(status=502)
        finally:
            span.end()

    async def _refuse_budget(self) -> web.StreamResponse:
        """The turn's cost has reached its budget: refuse (an error both APIs' clients read) and
        stop the turn, naming the budget."""
        from aiohttp import web

        self.over_budget += 1
        meter = self.meter
        message = (
            f"Reached maximum budget (${meter.budget:g}): the turn cost ${meter.cost_usd:.6g} over "
            f"{meter.responses} model responses, so the model proxy refused the next request"
        )
        if self.on_budget is not None and self.over_budget == 1:
            await self.on_budget(message)
        error = {"type": "invalid_request_error", "code": "max_budget", "message": message}
        return web.json_response({"type": "error", "error": error}, status=400)


def _measured(
    span: telemetry.Span, status: int, before: tuple[Usage, float | None], after: tuple[Usage, float | None]
) -> None:
    """The model request's answer on its span: HTTP status, tokens and cost this answer added."""
    (used_before, cost_before), (used, cost) = before, after
    span.set(
        http_status=status,
        input_tokens=used.input_tokens - used_before.input_tokens,
        output_tokens=used.output_tokens - used_before.output_tokens,
        cost_usd=None if cost is None or cost_before is None else round(cost - cost_before, 8),
    )
    if status >= 400:
        span.fail(f"the model endpoint answered HTTP {status}")


def _on(env: Mapping[str, str], name: str) -> bool:
    return env.get(name, "").strip().lower() in _TRUE


def _refusal(message: str) -> web.Response:
    """A 401 in Anthropic's error shape (what Claude Code shows; OpenAI clients read ``message`` too)."""
    from aiohttp import web

    body = {"type": "error", "error": {"type": "authentication_error", "message": message}}
    return web.json_response(body, status=401)


def _client_errors() -> type[Exception]:
    """aiohttp's client error base (imported with the proxy's aiohttp, never at module import)."""
    from aiohttp import ClientError

    return ClientError
