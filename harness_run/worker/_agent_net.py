"""The agent's network as a boundary: per-uid netfilter rules installed while the worker is root.

In a pod (and in a container with its own network namespace) the agent's processes share the
worker's network namespace, so ``HTTP(S)_PROXY`` alone is a convention: a process that ignores it
would reach whatever the worker may reach — the GKE metadata server included, which hands out the
pod's Google identity. :func:`confine_agent_network` runs before the uid switch, as root with
``NET_ADMIN`` and ``NET_RAW`` (``vocab.k8s.NETWORK_SETUP_CAPABILITIES``, dropped with the switch by
``_privileges``), and inserts at the top of the ``filter`` table's ``OUTPUT`` chain, for packets whose
socket belongs to the agent's uid (``-m owner --uid-owner``; only that uid, the worker's own
traffic is untouched):

- ``network`` ``none`` or an allow-list: ``ACCEPT`` to loopback (``127.0.0.0/8``, ``::1``: the model
  proxy, the egress proxy or relay, which apply the allow-list), everything else refused — TCP, UDP
  (DNS) and ICMP alike;
- ``open``: link-local ``169.254.0.0/16`` refused (the metadata server at 169.254.169.254 and GKE's
  at 169.254.169.252) — everything else stays open.

"Refused" is ``REJECT`` where the kernel has it (the agent's connect fails at once: connection
refused; a UDP send gets EPERM), else ``DROP`` (gVisor implements ACCEPT/DROP/RETURN and jumps, not
REJECT: the connect times out). The rules go in with ``iptables-restore --noflush`` (one process per
address family): ``iptables-legacy`` first (gVisor implements the legacy socket interface — with
raw sockets, hence ``NET_RAW`` — and its ``owner`` match, uid only), then ``iptables-nft`` (kernels
built without the legacy tables).

Only where the runtime says the namespace is the worker's own (``$HARNESS_RUN_AGENT_NETNS=own``:
the compiled pods; the container runtime with its own network): with ``shared`` (Docker's host
network) the worker never touches the host's firewall. **Fail closed**: when the rules cannot be
installed and the spec's network is ``none`` or an allow-list, :class:`UsageError` (the worker exits
2 naming the fix); with an open network a WARNING says what stays reachable and the worker runs.
"""

from __future__ import annotations

import itertools
import logging
import os
import socket
import subprocess
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

from harness_run.errors import UsageError
from harness_run.spec import Network
from harness_run.vocab.k8s import AGENT_NETNS_ENV, AGENT_UID_ENV, NETWORK_SETUP_CAPABILITIES

__all__ = ["AgentNetwork", "agent_rules", "confine_agent_network"]

log = logging.getLogger("harness_run.worker")

# (IPv4 restore command, IPv6 restore command), in the order tried
_BACKENDS: Final = (
    ("iptables-legacy-restore", "ip6tables-legacy-restore"),
    ("iptables-nft-restore", "ip6tables-nft-restore"),
)
# REJECT (a refused connect at once) where the kernel has it, else DROP (gVisor: the connect times out)
_TARGETS: Final = ("REJECT", "DROP")
_LOOPBACK: Final = {4: "127.0.0.0/8", 6: "::1/128"}
_LINK_LOCAL_V4: Final = "169.254.0.0/16"
_TIMEOUT: Final = 10.0
_FIX: Final = (
    "start the worker as root with the capabilities "
    + " and ".join(NETWORK_SETUP_CAPABILITIES)
    + " (besides the worker's own) in its own network namespace, with the iptables package in the "
    "image (compiled images have it; the sandbox and container runtimes add the capabilities; on GKE "
    f"Sandbox NET_RAW is what enables raw sockets), or set {AGENT_NETNS_ENV}=shared where the "
    "namespace is the host's"
)


@dataclass(frozen=True, slots=True)
class AgentNetwork:
    """What :func:`confine_agent_network` installed."""

    uid: int
    egress: str
    backend: str
    """The restore command that took the IPv4 rules (e.g. ``iptables-legacy-restore``)."""
    ipv6: bool
    """Whether IPv6 rules went in too (False: the namespace has no IPv6)."""
    seconds: float


def agent_rules(uid: int, network: Network, family: int, *, target: str = "REJECT") -> str:
    """The ``iptables-restore --noflush`` input for the agent's uid (``family`` 4 or 6; ``target``
    ``REJECT`` — a refused connect at once — or ``DROP``)."""
    owner = f"-m owner --uid-owner {uid}"
    if network.egress == "open":
        lines = [f"-I OUTPUT 1 -d {_LINK_LOCAL_V4} {owner} -j {target}"] if family == 4 else []
    else:  # inserted at the top in reverse: loopback first, then the rest refused
        lines = [f"-I OUTPUT 1 {owner} -j {target}", f"-I OUTPUT 1 -d {_LOOPBACK[family]} {owner} -j ACCEPT"]
    return "*filter\n" + "".join(f"{line}\n" for line in lines) + "COMMIT\n"


def _has_ipv6() -> bool:
    try:
        with socket.socket(socket.AF_INET6, socket.SOCK_DGRAM):
            return True
    except OSError:
        return False


def _restore(command: str, rules: str) -> str | None:
    """Run one restore; ``None`` on success, else why it failed (one line)."""
    try:
        done = subprocess.run(
            [command, "--noflush", "--wait"],
            input=rules,
            capture_output=True,
            text=True,
            timeout=_TIMEOUT,
            check=False,
        )
    except FileNotFoundError:
        return f"{command}: not installed"
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"{command}: {exc}"
    if done.returncode == 0:
        return None
    detail = " ".join((done.stderr or done.stdout).split())[:300]
    return f"{command}: exit {done.returncode}: {detail or 'no output'}"


def _install(uid: int, network: Network) -> tuple[str, bool] | list[str]:
    """Try each backend and target; (how the IPv4 rules went in, IPv6 too?) or why each failed."""
    errors: list[str] = []
    v6_wanted = _has_ipv6() and network.egress != "open"
    for (v4, v6), target in itertools.product(_BACKENDS, _TARGETS):
        failed = _restore(v4, agent_rules(uid, network, 4, target=target))
        if failed is not None:
            errors.append(failed)
            continue
        if not v6_wanted:
            return f"{v4} -j {target}", False
        failed = _restore(v6, agent_rules(uid, network, 6, target=target))
        if failed is None:
            return f"{v4} -j {target}", True
        errors.append(failed)
        # the IPv4 rules are in and harmless; a later attempt adds its own besides
    return errors


def confine_agent_network(env: Mapping[str, str], network: Network) -> AgentNetwork | None:
    """See the module docstring. ``None`` when nothing was installed (no agent uid, not root, not
    Linux, a shared namespace, or — open network only — the rules could not be installed)."""
    raw = env.get(AGENT_UID_ENV, "").strip()
    if not sys.platform.startswith("linux") or not raw.isdigit() or int(raw) == 0:
        return None  # no uid of its own: nothing tells the agent's packets apart (local runtime)
    netns = env.get(AGENT_NETNS_ENV, "").strip().lower()
    if netns != "own":
        if netns != "shared":
            log.info("%s is not 'own': the agent's network is left as it is", AGENT_NETNS_ENV)
        elif network.egress != "open":
            log.warning(
                "network %s: the network namespace is the host's (%s=shared), so the agent's egress "
                "goes through the egress proxy by convention (HTTP(S)_PROXY) only",
                network.egress,
                AGENT_NETNS_ENV,
            )
        return None
    uid = int(raw)
    started = time.monotonic()
    outcome = _install(uid, network) if os.getuid() == 0 else ["the worker is not root"]
    if isinstance(outcome, list):
        why = "; ".join(outcome)
        if network.egress != "open":
            raise UsageError(
                f"network {network.egress!r}: cannot confine the agent's processes (uid {uid}) to "
                f"loopback ({why}); {_FIX}"
            )
        log.warning(
            "network open: could not keep the agent's processes (uid %d) from the metadata server "
            "(169.254.0.0/16: the pod's identity) — only the credential guards refuse it (%s); %s",
            uid,
            why,
            _FIX,
        )
        return None
    backend, ipv6 = outcome
    confined = AgentNetwork(uid, network.egress, backend, ipv6, time.monotonic() - started)
    log.info(
        "agent network (uid %d, network %s): %s in %.1f ms (%s%s)",
        uid,
        network.egress,
        "loopback only" if network.egress != "open" else "no link-local (metadata server)",
        confined.seconds * 1000,
        backend,
        ", IPv6 too" if ipv6 else "",
    )
    return confined
