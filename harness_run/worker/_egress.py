"""The worker's egress control: the agent's way out when the spec's ``network`` is not ``open``.

- In a container without network (the container runtime sets ``$HARNESS_RUN_EGRESS_SOCKET``): a
  :class:`~harness_run.security.LoopbackRelay` to the host's egress proxy. The worker's own traffic
  (the model proxy's upstream, git) goes through it with the worker's token; the agent's without.
- Elsewhere (a pod, whose NetworkPolicies let the worker reach what it needs): an
  :class:`~harness_run.security.EgressProxy` in the worker, allowing the spec's hosts only.

Either way the agent's ``HTTP(S)_PROXY`` names it (``AGENT_PROXY_ENV``, applied by ``agent_env``).
"""

from __future__ import annotations

import logging
import os

from harness_run.security import AGENT_PROXY_ENV, NO_PROXY, EgressProxy, LoopbackRelay, proxy_env
from harness_run.spec import AgentSpec
from harness_run.worker._settings import WorkerSettings

__all__ = ["start_egress"]

log = logging.getLogger("harness_run.worker")


async def start_egress(settings: WorkerSettings, spec: AgentSpec) -> EgressProxy | LoopbackRelay | None:
    """Start the agent's egress control (see the module docstring) and point the environment at
    it; ``None`` when the spec's egress is open and the container has a network."""
    network = spec.network
    if settings.egress_socket is not None:
        relay = LoopbackRelay(settings.egress_socket)
        await relay.start()
        agent = f"http://127.0.0.1:{relay.port}"
        own = (
            f"http://worker:{settings.egress_token}@127.0.0.1:{relay.port}"
            if settings.egress_token
            else agent
        )
        os.environ.update(proxy_env(own))
        for var in ("NO_PROXY", "no_proxy"):  # the host's loopback too goes through the host's proxy
            os.environ.pop(var, None)
        os.environ.pop("HARNESS_RUN_EGRESS_TOKEN", None)
        os.environ[AGENT_PROXY_ENV] = agent
        log.info("egress %s through the host's proxy (relay on %s)", network.egress, agent)
        return relay
    if network.egress == "open":
        return None
    proxy = EgressProxy(network.allow_hosts)
    await proxy.start()
    os.environ[AGENT_PROXY_ENV] = f"http://127.0.0.1:{proxy.port}"
    log.info(
        "egress %s: the agent's proxy on 127.0.0.1:%d allows %s (direct: %s)",
        network.egress,
        proxy.port,
        ", ".join(network.allow_hosts) or "nothing",
        NO_PROXY,
    )
    return proxy
