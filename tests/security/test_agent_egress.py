"""The agent's network is a boundary where the worker has its own network namespace (a pod; a
container with its own network): the worker, as root with NET_ADMIN/NET_RAW, installs per-uid rules
before it drops privileges, so the agent's processes reach loopback only — whatever they do with
``HTTPS_PROXY`` — while the worker itself keeps its access.

On the container runtime (the same worker and image as a pod) with ``network="none"``: the test
puts the metadata server's address, 169.254.169.254, on the container's loopback device and a
canary listener on it (a non-loopback address the container can reach, which never leaves its
namespace). With the credential guards off, the scripted model has the agent connect to it every
way it can (Python, bash's /dev/tcp, curl without the proxy, UDP); the oracle: the canary counts
no connection from the agent, the same connect as the worker's uid reaches it, and the turns still
reach the model through the model proxy. Fail closed: the worker without NET_ADMIN/NET_RAW refuses
to start with ``network="none"`` (exit 2, naming the capabilities) and starts, warning, with an
open network.
"""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Any

import pytest

from harness_run import AgentSpec, SecurityPolicy, SessionConfig, local
from harness_run.runtime.container import ContainerEngine
from harness_run.testing import ScriptedModel, shell, text
from harness_run.vocab import k8s

pytestmark = [pytest.mark.docker, pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(1200)]

METADATA = "169.254.169.254"
LABEL_SESSION = "harness-run.dev/session"  # the container runtime's label naming a container's session
HITS = "/tmp/canary-hits"  # fresh-machine ok: inside the container

ELSEWHERE = "10.255.0.1"  # stands for any other address (open network): also put on lo only


def _canary(address: str) -> str:
    """Python run as root in the container (NET_ADMIN): put ``address`` on lo through rtnetlink (no
    iproute2 in the image), listen on port 80 there and append a line to HITS.<address> per
    connection."""
    return f"""
import socket, struct
s = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, socket.NETLINK_ROUTE)
s.bind((0, 0))
ip = socket.inet_aton({address!r})
body = struct.pack("BBBBI", socket.AF_INET, 32, 0, 0, socket.if_nametoindex("lo"))
body += struct.pack("HH", 8, 2) + ip + struct.pack("HH", 8, 1) + ip
s.send(struct.pack("IHHII", 16 + len(body), 20, 0x1 | 0x4 | 0x200 | 0x400, 1, 0) + body)
error = struct.unpack("i", s.recv(4096)[16:20])[0]
assert error in (0, -17), error
server = socket.create_server(({address!r}, 80))
open("{HITS}.{address}.ready", "w").close()
while True:
    conn, peer = server.accept()
    with open("{HITS}.{address}", "a") as f:
        f.write(repr(peer) + "\\n")
    conn.close()
"""


def _start_canary(container: Any, address: str) -> None:
    container.exec_run(["python3", "-c", _canary(address)], user="0", detach=True)
    ready = ["test", "-e", f"{HITS}.{address}.ready"]
    _poll(lambda: container.exec_run(ready).exit_code == 0, f"the canary on {address}")


def _connect(container: Any, address: str, uid: int) -> str:
    """Connect to ``address``:80 as ``uid``: "connected" or the error."""
    code = f"import socket; socket.create_connection(({address!r}, 80), timeout=3); print('connected')"
    _, out = container.exec_run(["python3", "-c", f"{code}"], user=str(uid))
    return out.decode(errors="replace").strip().splitlines()[-1]


# (name, command) as the agent: every one must fail
ATTACKS = (
    (
        "python-connect",
        f"python3 -c \"import socket; socket.create_connection(('{METADATA}', 80), timeout=3); "
        "print('connected')\" 2>&1 | tail -1",
    ),
    ("bash-dev-tcp", f"timeout 5 bash -c 'echo x > /dev/tcp/{METADATA}/80' 2>&1; echo rc=$?"),
    (
        "curl-no-proxy",
        f"curl -s -m 3 --noproxy '*' -o /dev/null -w 'code=%{{http_code}}' http://{METADATA}/; echo rc=$?",
    ),
    (
        "udp-send",
        f"python3 -c \"import socket; socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(b'x', "
        f"('{METADATA}', 53)); print('sent')\" 2>&1 | tail -1",
    ),
)


SPEC = AgentSpec(
    name="sec-agentnet",
    harness="claude-code",
    model="claude-sonnet-4-6",
    env={"CLAUDE_CODE_MAX_RETRIES": "0"},
    network="none",
)


@pytest.fixture(scope="module")
def options(container_opts: Any) -> dict[str, Any]:
    return {"isolation": "container", "container": container_opts}


@pytest.fixture(scope="module")
def image(options: dict[str, Any], tmp_path_factory: pytest.TempPathFactory) -> str:
    """The engine's image (built once; the turn test's deploy finds it)."""
    engine = local.deploy(SPEC, workdir=tmp_path_factory.mktemp("image"), **options)
    assert isinstance(engine, ContainerEngine)
    try:
        return engine.image
    finally:
        engine.close()


def _container(docker_client: Any, session_id: str) -> Any:
    found = docker_client.containers.list(
        filters={"label": f"{LABEL_SESSION}={session_id}"}, ignore_removed=True
    )
    assert len(found) == 1, found
    return found[0]


def _poll(check: Any, what: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def _refused(output: str) -> bool:
    """A connect that failed at the network: refused at once (REJECT), or timed out where the
    kernel only has DROP (gVisor) — not some other error of the command."""
    return "connection refused" in output.lower() or "timed out" in output.lower()


def _hits(container: Any, address: str = METADATA) -> list[str]:
    code, out = container.exec_run(["sh", "-c", f"cat {HITS}.{address} 2>/dev/null; true"], user="0")
    assert code == 0, out
    return out.decode().split("\n")[:-1]


async def test_the_agent_reaches_loopback_only_and_the_worker_keeps_its_access(
    image: str, options: dict[str, Any], docker_client: Any, tmp_path: Path
) -> None:
    with ScriptedModel() as model:
        engine = local.deploy(SPEC, workdir=tmp_path / "workdir", **options)
        try:
            assert isinstance(engine, ContainerEngine)
            assert engine.image == image  # built once
            session = engine.start_session(
                config=SessionConfig(security_policy=SecurityPolicy(include_credential_guards=False))
            )
            secrets = {"ANTHROPIC_BASE_URL": model.url, "ANTHROPIC_API_KEY": "scripted-dummy-key"}
            model.add(text("ready"))
            first = await session.run("start", secrets=secrets)  # the model proxy path works
            assert not first.is_error, first.error
            container = _container(docker_client, session.session_id)
            logs = container.logs().decode(errors="replace")
            installed = re.search(
                r"agent network \(uid 1001, network none\): loopback only in ([\d.]+) ms", logs
            )
            assert installed, logs
            print(f"\nrules installed at worker start in {installed.group(1)} ms")
            _start_canary(container, METADATA)

            model.add(*(shell(command) for _, command in ATTACKS), text("done"))
            attacked = await session.run("reach the metadata server", secrets=secrets)
            assert not attacked.is_error, attacked.error
            outputs = model.requests[-1].tool_results[-len(ATTACKS) :]
            by_name = dict(zip([name for name, _ in ATTACKS], outputs, strict=True))
            assert _hits(container) == [], by_name  # the oracle: nothing of the agent's got there
            assert "connected" not in by_name["python-connect"], by_name
            assert "rc=0" not in by_name["bash-dev-tcp"], by_name
            assert "code=000" in by_name["curl-no-proxy"], by_name
            assert "sent" not in by_name["udp-send"], by_name
            assert _refused(by_name["python-connect"]), by_name

            # the worker's uid (and root) is not confined: the same connect reaches the canary
            assert _connect(container, METADATA, k8s.AGENT_UID) == "connected"
            _poll(lambda: len(_hits(container)) == 1, "the worker's connection")

            # and the agent still gets its work done through loopback (the model proxy)
            model.add(shell("echo still here"), text("done"))
            again = await session.run("once more", secrets=secrets)
            assert not again.is_error, again.error
            assert "still here" in model.requests[-1].tool_results[-1]
        finally:
            await engine.aclose()


def test_open_network_rules_and_failing_closed(
    image: str, docker_client: Any, docker_labels: dict[str, str]
) -> None:
    """The image's worker run as the runtimes run it, in its own network namespace. An open network:
    the agent's uid reaches any address but link-local (the metadata server), the worker's reaches
    that too. Without NET_ADMIN/NET_RAW: ``none`` refuses to start (exit 2, the fix named); ``open``
    starts and says what stays reachable."""
    base: dict[str, Any] = {
        "detach": True,
        "network_mode": "none",
        "user": "0:0",
        "cap_drop": ["ALL"],
        "security_opt": ["no-new-privileges"],
        "labels": docker_labels,
    }
    worker_caps = list(k8s.WORKER_CAPABILITIES)
    all_caps = [*worker_caps, *k8s.NETWORK_SETUP_CAPABILITIES]
    env = {
        "HARNESS_RUN_STORE": "/tmp/store",  # fresh-machine ok: inside the container
        k8s.AGENT_UID_ENV: str(k8s.AGENT_RUN_UID),
        k8s.AGENT_NETNS_ENV: "own",
    }
    config = docker_client.images.get(image).attrs["Config"]
    worker = [*(config.get("Entrypoint") or []), *(config.get("Cmd") or [])]
    open_spec = (  # the same image with the spec's network made open (fresh-machine ok: /tmp in it)
        "python3 -c \"import json; d = json.load(open('/opt/harness-run/spec.json')); "
        "d['network'] = 'open'; json.dump(d, open('/tmp/open.json', 'w'))\" && exec \"$@\""  # fresh-machine ok
    )
    as_open: dict[str, Any] = {
        "environment": {**env, "HARNESS_RUN_SPEC": "/tmp/open.json"},  # fresh-machine ok: in it
        "entrypoint": ["sh", "-c", open_spec, "sh"],
        "command": worker,
    }
    containers = [
        refused := docker_client.containers.run(image, environment=env, cap_add=worker_caps, **base),
        unguarded := docker_client.containers.run(image, cap_add=worker_caps, **as_open, **base),
        guarded := docker_client.containers.run(image, cap_add=all_caps, **as_open, **base),
    ]
    try:
        assert refused.wait(timeout=60)["StatusCode"] == 2
        message = refused.logs().decode(errors="replace")
        assert "cannot confine the agent's processes (uid 1001) to loopback" in message, message
        assert "NET_ADMIN and NET_RAW" in message, message
        for container in (unguarded, guarded):
            _poll(lambda c=container: "listening on" in c.logs().decode(errors="replace"), "the worker", 60)
        logs = unguarded.logs().decode(errors="replace")
        assert "could not keep the agent's processes (uid 1001) from the metadata server" in logs, logs
        logs = guarded.logs().decode(errors="replace")
        assert "agent network (uid 1001, network open): no link-local (metadata server)" in logs, logs
        for address in (METADATA, ELSEWHERE):
            _start_canary(guarded, address)
        assert _refused(_connect(guarded, METADATA, k8s.AGENT_RUN_UID))
        assert _connect(guarded, ELSEWHERE, k8s.AGENT_RUN_UID) == "connected"
        assert _connect(guarded, METADATA, k8s.AGENT_UID) == "connected"  # the worker's uid
        _poll(lambda: len(_hits(guarded, METADATA)) == 1 and len(_hits(guarded, ELSEWHERE)) == 1, "hits")
    finally:
        for container in containers:
            container.remove(force=True)
