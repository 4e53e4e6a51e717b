"""What the agent's per-uid network rules cost (``harness_run.worker._agent_net``), in a container.

One labelled number per line. Needs Docker, the base image and ``PIP_CERT``, as the docker tests.

    python -m benchmarks agent_netrules [--rounds N] [--connects N] [--smoke]

In one container of a compiled image with its own network namespace (``network_mode="none"``, root
with the worker's capabilities plus NET_ADMIN/NET_RAW, as the container runtime starts its worker):

- netrules_install_ms: the rules for ``network="none"`` put in as the worker does it at start
  (``iptables-restore`` for IPv4 and IPv6), median of ``--rounds``;
- netrules_connect_{agent,worker}_{off,on}_us: one TCP connect + close to a listener on 127.0.0.1,
  median over ``--connects``, as the agent's uid (1001) and the worker's (1000), without and with
  the rules (alternating rounds);
- netrules_connect_agent_added_us, netrules_connect_worker_added_us: with minus without.
"""

from __future__ import annotations

import argparse
import json
import statistics
from typing import Any

from benchmarks._common import claude_spec, local_engine
from benchmarks._services import docker_env
from harness_run.runtime.container import ContainerEngine
from harness_run.vocab import k8s

_INSTALL = """
import json, sys, time
from harness_run.spec import Network
from harness_run.worker._agent_net import _install
took = []
for _ in range(int(sys.argv[1])):
    start = time.perf_counter()
    assert isinstance(_install(1001, Network(egress="none")), tuple)
    took.append((time.perf_counter() - start) * 1000)
print(json.dumps(took))
"""
_CONNECT = """
import json, socket, sys, time
port, n = int(sys.argv[1]), int(sys.argv[2])
took = []
for _ in range(n):
    start = time.perf_counter()
    socket.create_connection(("127.0.0.1", port)).close()
    took.append((time.perf_counter() - start) * 1e6)
print(json.dumps(took))
"""
_LISTEN = """
import socket
server = socket.create_server(("127.0.0.1", 7777), backlog=512)
open("/tmp/listening", "w").close()
while True:
    server.accept()[0].close()
"""


def _exec(container: Any, code: str, *args: str, user: str = "0") -> Any:
    exit_code, out = container.exec_run(["python3", "-c", code, *args], user=user)
    assert exit_code == 0, out
    return json.loads(out.decode().strip().splitlines()[-1])


def _flush(container: Any) -> None:
    for tool in ("iptables-legacy", "ip6tables-legacy", "iptables-nft", "ip6tables-nft"):
        container.exec_run([tool, "-F", "OUTPUT"], user="0")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--connects", type=int, default=500)
    parser.add_argument("--smoke", action="store_true", help="a short run (CI smoke test)")
    args = parser.parse_args()
    rounds, connects = (1, 20) if args.smoke else (args.rounds, args.connects)
    docker = docker_env()
    client = docker.client
    engine = local_engine(
        claude_spec("bench-netrules", network="none"), "hr-bench-netrules-", **docker.engine_options()
    )
    assert isinstance(engine, ContainerEngine)
    image = engine.image
    engine.close()
    container = client.containers.run(
        image,
        entrypoint=["sleep", "infinity"],
        detach=True,
        network_mode="none",
        user="0:0",
        cap_drop=["ALL"],
        cap_add=[*k8s.WORKER_CAPABILITIES, *k8s.NETWORK_SETUP_CAPABILITIES],
        security_opt=["no-new-privileges"],
    )
    try:
        container.exec_run(["python3", "-c", _LISTEN], user="0", detach=True)
        while container.exec_run(["test", "-e", "/tmp/listening"]).exit_code != 0:
            pass
        install: list[float] = []
        samples: dict[str, list[float]] = {}
        for _ in range(rounds):
            for on in (False, True):
                _flush(container)
                if on:
                    install += _exec(container, _INSTALL, "1")
                for who, uid in (("agent", k8s.AGENT_RUN_UID), ("worker", k8s.AGENT_UID)):
                    took = _exec(container, _CONNECT, "7777", str(connects), user=str(uid))
                    samples.setdefault(f"{who}_{'on' if on else 'off'}", []).extend(took)
    finally:
        container.remove(force=True)
    print(f"netrules_install_ms {statistics.median(install):.1f}")
    for label, values in samples.items():
        print(f"netrules_connect_{label}_us {statistics.median(values):.1f}")
    for who in ("agent", "worker"):
        added = statistics.median(samples[f"{who}_on"]) - statistics.median(samples[f"{who}_off"])
        print(f"netrules_connect_{who}_added_us {added:.1f}")


if __name__ == "__main__":
    main()
