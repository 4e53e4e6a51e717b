"""The host runtime and the spec's ``network``: refused when not ``open`` (it cannot be enforced)."""

from __future__ import annotations

from harness_run.errors import UsageError
from harness_run.spec import AgentSpec

__all__ = ["check_host_egress"]


def check_host_egress(spec: AgentSpec, *, enforced: bool = False) -> None:
    """Refuse a ``network`` setting the host runtime cannot enforce (its processes share the host's
    network), instead of ignoring it. The worker in a container or pod passes ``enforced=True``
    (``LocalEngine(egress_enforced=True)``): its egress proxy and the container's (or pod's)
    network enforce it."""
    network = spec.network
    if enforced or network.egress == "open":
        return
    shown = "'none'" if network.egress == "none" else f"an allow-list ({', '.join(network.allow_hosts)})"
    raise UsageError(
        f"spec {spec.name!r} sets network egress {shown}, which the local runtime cannot enforce "
        "(its processes use the host's network); use local.deploy(spec, isolation='container') or "
        "sandbox.deploy(spec), which enforce it, or set network='open' to run on the host"
    )
