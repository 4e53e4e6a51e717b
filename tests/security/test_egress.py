"""Egress enforced where it is promised (issue 12, item 4).

- The egress proxy itself (real sockets on 127.0.0.1): allowed hosts pass, everything else is
  refused with a 403 naming the setting, the worker's token passes anywhere.
- The host runtime refuses ``network`` settings it cannot enforce.
- The red-team oracle on the container runtime: a canary listener on the host's 127.0.0.1 (not in
  the allow-list); the scripted model makes the agent reach for it with curl (direct, through the
  proxy, CONNECT), Python and bash's ``/dev/tcp``, with ``network="none"`` and with an allow-list.
  No connection ever arrives; the allowed host answers through the egress proxy; every harness's
  turn still reaches its model (the model proxy inside the container goes out through the host's
  egress proxy with the worker's token).
"""

from __future__ import annotations

import asyncio
import base64
import json
import socket
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from testkit.git_http import GitHttpServer, make_bare_repo
from testkit.listeners import ALLOWED_BODY, Canary, allowed_server, canary_listener

from harness_run import AgentSpec, GitOptions, RepoSource, SessionConfig, UsageError, local
from harness_run.security import EgressProxy, host_allowed
from harness_run.testing import ScriptedModel, shell, text

from ._attacks import MODELS, Canaries


@pytest.fixture
def canary() -> Iterator[Canary]:
    with canary_listener() as listener:
        yield listener


@pytest.fixture
def allowed() -> Iterator[int]:
    with allowed_server() as port:
        yield port


def test_allow_list_matching() -> None:
    hosts = ("pypi.org", "*.github.com", "api.example.com:8443")
    assert host_allowed(hosts, "pypi.org", 443) and host_allowed(hosts, "PyPI.org.", 80)
    assert host_allowed(hosts, "codeload.github.com", 443) and not host_allowed(hosts, "github.com", 443)
    assert host_allowed(hosts, "api.example.com", 8443) and not host_allowed(hosts, "api.example.com", 443)
    assert not host_allowed(hosts, "pypi.org", 22) and not host_allowed(hosts, "evilpypi.org", 443)


async def test_egress_proxy_allows_listed_hosts_only(canary: Canary, allowed: int) -> None:
    proxy = EgressProxy([f"127.0.0.1:{allowed}"], worker_token="worker-pass")
    await proxy.start()
    via = urllib.request.build_opener(urllib.request.ProxyHandler({"http": f"http://127.0.0.1:{proxy.port}"}))

    def get(url: str, opener: urllib.request.OpenerDirector = via) -> tuple[int, str]:
        try:
            with opener.open(url, timeout=10) as resp:
                return int(resp.status), resp.read().decode()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read().decode()

    def connect(port: int, auth: str | None = None) -> bytes:
        with socket.create_connection(("127.0.0.1", proxy.port), timeout=10) as sock:
            extra = f"Proxy-Authorization: Basic {auth}\r\n" if auth else ""
            sock.sendall(f"CONNECT 127.0.0.1:{port} HTTP/1.1\r\nHost: x\r\n{extra}\r\n".encode())
            return sock.recv(4096)

    try:
        assert await asyncio.to_thread(get, f"http://127.0.0.1:{allowed}/x") == (200, ALLOWED_BODY)
        status, body = await asyncio.to_thread(get, f"http://127.0.0.1:{canary.port}/")
        assert status == 407 and "network.allow_hosts" in body, body
        # 407 with a challenge (a token is set: git sends its proxy credentials only after one)
        assert (await asyncio.to_thread(connect, canary.port)).startswith(b"HTTP/1.1 407")
        wrong = base64.b64encode(b"worker:guess").decode()
        assert (await asyncio.to_thread(connect, canary.port, wrong)).startswith(b"HTTP/1.1 407")
        assert proxy.refused == [f"127.0.0.1:{canary.port}"] * 3
        assert canary.hits == 0
        # the worker's own traffic (its token) may go anywhere
        right = base64.b64encode(b"worker:worker-pass").decode()
        assert (await asyncio.to_thread(connect, canary.port, right)).startswith(b"HTTP/1.1 200")
        await _poll(lambda: canary.hits == 1)
    finally:
        await proxy.aclose()


async def _poll(done: Any, timeout: float = 10.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not done():
        assert asyncio.get_running_loop().time() < deadline, "timed out"
        await asyncio.sleep(0.02)


@pytest.mark.parametrize("network", ["none", ["pypi.org"]])
def test_host_runtime_refuses_egress_it_cannot_enforce(tmp_path: Path, network: Any) -> None:
    spec = AgentSpec(name="egress-host", harness="claude-code", model="claude-sonnet-4-6", network=network)
    with pytest.raises(UsageError) as caught:
        local.deploy(spec, workdir=tmp_path)
    message = str(caught.value)
    assert "network egress" in message and "isolation='container'" in message
    assert "sandbox.deploy" in message


def _attacks(port: int) -> dict[str, str]:
    """Every way the agent tries to reach the canary at 127.0.0.1:``port`` of the host."""
    url = f"http://127.0.0.1:{port}/"
    return {
        "curl-direct": f"curl -s -m 5 -o /dev/null -w 'code=%{{http_code}}' {url}; echo rc=$?",
        "curl-proxy": f"curl -s -m 5 --noproxy '' {url}; echo rc=$?",
        "curl-connect": f"curl -s -m 5 -p --noproxy '' {url}; echo rc=$?",
        "python-socket": (
            "python3 -c \"import socket; socket.create_connection(('127.0.0.1', "
            f"{port}), timeout=5); print('connected')\" 2>&1 | tail -1"
        ),
        "bash-dev-tcp": f"bash -c 'echo x > /dev/tcp/127.0.0.1/{port}' 2>&1; echo rc=$?",
    }


@pytest.mark.docker
@pytest.mark.integration
@pytest.mark.slow
@pytest.mark.timeout(1200)
async def test_container_egress_none_and_allowlist(
    container_opts: Any, tmp_path: Path, canary: Canary, allowed: int
) -> None:
    options: dict[str, Any] = {"isolation": "container", "container": container_opts}
    attacks = _attacks(canary.port)
    reach_allowed = f"curl -s -m 10 --noproxy '' http://127.0.0.1:{allowed}/ok; echo; echo rc=$?"
    show_proxy = 'echo "proxy=$HTTPS_PROXY"'
    keys = Canaries()
    make_bare_repo(tmp_path / "srv", "app", {"README.md": "app\n"})
    with ScriptedModel() as model, GitHttpServer(tmp_path / "srv", keys.repo_token) as git_server:
        results: dict[str, list[str]] = {}
        for label, network in (("none", "none"), ("allowlist", [f"127.0.0.1:{allowed}"])):
            # with `none`, the worker's own needs stay reachable: a clone and a push (git server on
            # the host's 127.0.0.1), through the host's egress proxy with the worker's token
            repo = {"repos": [RepoSource.git(f"{git_server.url}/app.git", auth="GH_TOKEN")]}
            spec = AgentSpec(
                name=f"egress-{label}",
                harness="claude-code",
                model="claude-sonnet-4-6",
                extra_harnesses=["codex", "opencode"] if label == "allowlist" else [],
                env={"CLAUDE_CODE_MAX_RETRIES": "0", "HARNESS_RUN_CODEX_MAX_RETRIES": "0"},
                network=network,
                git=GitOptions(commit="after_turn", push=True),
                **(repo if label == "none" else {}),
            )
            engine = local.deploy(spec, workdir=tmp_path / "workdir", **options)
            try:
                secrets = {"ANTHROPIC_BASE_URL": model.url, "ANTHROPIC_API_KEY": keys.model_key}
                if label == "none":
                    secrets["GH_TOKEN"] = keys.repo_token
                    model.add(shell("echo egress > app/egress.txt"))
                model.add(*(shell(c) for c in attacks.values()), shell(reach_allowed), shell(show_proxy))
                model.add(text("done"))
                branch = {"branch": "egress/none", "base_branch": "main"} if label == "none" else {}
                session = engine.start_session(**branch)
                result = await session.run("reach the canary", secrets=secrets)
                assert not result.is_error, result.error  # the model stayed reachable (host egress)
                results[label] = model.requests[-1].tool_results[-(len(attacks) + 2) :]
                if label == "none":
                    assert result.pushed_ref == "refs/heads/egress/none", result
                    assert git_server.authorized > 0
                if label == "allowlist":  # Codex and OpenCode reach their model proxy directly too
                    for harness in ("codex", "opencode"):
                        config = SessionConfig(harness=harness, model=MODELS[harness])
                        model.add(shell(reach_allowed), text("done"))
                        other = await engine.start_session(config=config).run(
                            "reach the allowed host",
                            secrets={"OPENAI_BASE_URL": model.openai_url, "OPENAI_API_KEY": keys.model_key},
                        )
                        assert not other.is_error, (harness, other.error)
                        assert ALLOWED_BODY in model.requests[-1].tool_results[-1], harness
            finally:
                await engine.aclose()
        bodies = "\n".join(json.dumps(r.body) for r in model.requests)
    assert canary.hits == 0, results  # the oracle: nothing ever reached the canary
    for label, outputs in results.items():
        assert len(outputs) == len(attacks) + 2, outputs
        by_name = dict(zip([*attacks, "allowed", "proxy"], outputs, strict=True))
        assert "code=000" in by_name["curl-direct"], by_name  # no route (loopback of the container)
        for name in ("curl-proxy", "curl-connect"):  # the egress proxy refuses it, naming the setting
            assert "network.allow_hosts" in by_name[name] or "rc=56" in by_name[name], by_name
        assert "connected" not in by_name["python-socket"], by_name
        assert "rc=0" not in by_name["bash-dev-tcp"], by_name
        assert by_name["proxy"].strip().startswith("proxy=http://127.0.0.1:"), by_name
        assert "@" not in by_name["proxy"], by_name  # never the worker's own pass
        reached = ALLOWED_BODY in by_name["allowed"]
        assert reached == (label == "allowlist"), by_name
    assert keys.model_key not in bodies
