"""The operator policy over HTTP: a real server (the app ``harness-run serve`` runs, on 127.0.0.1)
answers a caller's attempt to point the operator's credentials at its own URL, to reach the metadata
server, to work in ``/etc`` or to lift the engine's limits with 403 and JSON naming the field and
the setting that would allow it — and nothing was started: no session record, no turn, no event."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncGenerator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web

from harness_run import AgentSpec
from harness_run.server import ServerPolicy, ServerState, create_key, key_store, make_app
from harness_run.store import SqliteStore

from ._helpers import MODEL

SPEC = AgentSpec(name="guarded", harness="claude-code", model=MODEL, max_budget_usd=2.0, max_turns=4)
ATTACKER = "https://attacker.example/v1"
CALLER_KEY = "sk-ant-caller-5f0c2a9e41"


@dataclass
class _Server:
    url: str
    key: str
    store: SqliteStore
    http: aiohttp.ClientSession

    async def call(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        headers = {"Authorization": f"Bearer {self.key}"}
        async with self.http.request(method, self.url + path, json=body, headers=headers) as answer:
            text = await answer.text()
            return answer.status, json.loads(text) if text else None


@contextlib.asynccontextmanager
async def _serving(root: Path, policy: ServerPolicy) -> AsyncGenerator[_Server]:
    """A server on 127.0.0.1 with ``policy`` (``ServerThread`` takes none yet), and one exec-scoped key."""
    store = SqliteStore(root)
    keys = key_store(store)
    _, key = create_key(keys, "caller", scopes=("exec",))
    state = ServerState(store, root, [SPEC], policy=policy)
    runner = web.AppRunner(make_app(state, keys, allow_exec=True), access_log=None, shutdown_timeout=1.0)
    await runner.setup()
    try:
        await web.TCPSite(runner, "127.0.0.1", 0).start()
        port = runner.addresses[0][1]
        async with aiohttp.ClientSession() as http:
            yield _Server(f"http://127.0.0.1:{port}", key, store, http)
    finally:
        await state.close()
        await runner.cleanup()
        store.close()


def _forbidden(answer: tuple[int, Any], field: str, allow: str) -> None:
    status, body = answer
    assert status == 403, answer
    assert body["error"] == "forbidden" and body["field"] == field, body
    assert allow in body["allow"] and field in body["message"], body
    assert CALLER_KEY not in json.dumps(body)


def test_default_policy_refuses_over_http_and_starts_nothing(tmp_path: Path) -> None:
    async def main() -> None:
        async with _serving(tmp_path / "store", ServerPolicy()) as server:
            sessions = f"/v1/engines/{SPEC.name}/sessions"
            _forbidden(
                await server.call("POST", sessions, {"config": {"workspace": {"host_dir": "/etc"}}}),
                "config.workspace.host_dir",
                "--host-dir-root DIR",
            )
            _forbidden(
                await server.call(
                    "POST", sessions, {"config": {"model_base_url": "http://169.254.169.254/"}}
                ),
                "config.model_base_url",
                "allow_endpoints",
            )
            _forbidden(
                await server.call("POST", sessions, {"config": {"max_budget_usd": None}}),
                "config.max_budget_usd",
                "allow_higher_limits",
            )
            no_guards = {
                "engine": SPEC.name,
                "config": {"security_policy": {"include_credential_guards": False}},
            }
            _forbidden(
                await server.call("POST", "/v1/workspaces", no_guards),
                "config.security_policy.include_credential_guards",
                "allow_looser_security",
            )
            assert server.store.list_sessions() == []  # nothing was started
            assert (await server.call("GET", "/v1/sessions"))[1]["sessions"] == []

            status, made = await server.call("POST", sessions, {"config": {"max_budget_usd": 0.5}})
            assert status == 201, made
            sid = made["session_id"]
            turns = f"/v1/sessions/{sid}/turns"
            for secrets, field, allow in [
                ({"ANTHROPIC_BASE_URL": ATTACKER}, "secrets.ANTHROPIC_BASE_URL", "allow_endpoints"),
                ({"CLAUDE_CODE_USE_VERTEX": "1"}, "secrets.CLAUDE_CODE_USE_VERTEX", "allow_vertex"),
            ]:
                body = {"prompt": "hi", "secrets": {**secrets, "ANTHROPIC_API_KEY": CALLER_KEY}}
                _forbidden(await server.call("POST", turns, body), field, allow)
            _forbidden(
                await server.call("POST", turns, {"prompt": "hi", "config": {"max_budget_usd": 1.0}}),
                "config.max_budget_usd",
                "allow_higher_limits",
            )
            exec_body = {"command": "true", "secrets": {"GOOGLE_APPLICATION_CREDENTIALS": "/srv/sa.json"}}
            _forbidden(
                await server.call("POST", f"/v1/sessions/{sid}/exec", exec_body),
                "secrets.GOOGLE_APPLICATION_CREDENTIALS",
                "allow_vertex",
            )
            record = server.store.get_session(sid)
            assert record is not None and record.turns == 0 and server.store.read_events(sid) == []

    asyncio.run(main())


def test_a_callers_endpoint_gets_no_operator_key_and_no_private_address(tmp_path: Path) -> None:
    """Endpoints allowed, loopback callers treated as remote (a reverse proxy on the host): the
    caller's URL must come with the caller's own key, and may not be the metadata server."""
    projects = tmp_path / "projects"
    (projects / "webapp").mkdir(parents=True)
    (projects / "etc").symlink_to("/etc")
    policy = ServerPolicy(allow_endpoints=True, host_dir_root=projects, local_callers=False)

    async def main() -> None:
        async with _serving(tmp_path / "store", policy) as server:
            sessions = f"/v1/engines/{SPEC.name}/sessions"
            _forbidden(
                await server.call(
                    "POST", sessions, {"config": {"model_base_url": "http://169.254.169.254/"}}
                ),
                "config.model_base_url",
                "allow_private_endpoints",
            )
            _forbidden(
                await server.call(
                    "POST", sessions, {"config": {"workspace": {"host_dir": str(projects / "etc")}}}
                ),
                "config.workspace.host_dir",
                "host_dir_root",
            )
            assert server.store.list_sessions() == []
            status, made = await server.call(
                "POST", sessions, {"config": {"workspace": {"host_dir": str(projects / "webapp")}}}
            )
            assert status == 201, made
            turns = f"/v1/sessions/{made['session_id']}/turns"
            _forbidden(
                await server.call(
                    "POST", turns, {"prompt": "hi", "secrets": {"ANTHROPIC_BASE_URL": ATTACKER}}
                ),
                "secrets.ANTHROPIC_BASE_URL",
                "your own model key",
            )
            record = server.store.get_session(made["session_id"])
            assert record is not None and record.turns == 0

    asyncio.run(main())
