"""A test Kubernetes cluster made of real parts: an API emulator and an Agent Sandbox controller.

- :class:`ClusterEmulator` — an in-memory Kubernetes API server (kmock, real HTTP on 127.0.0.1)
  serving the Agent Sandbox CRDs, ServiceAccounts and NetworkPolicies to the official ``kubernetes``
  client, with validation against the CRD schemas, label selectors and resumable watches.
- :class:`SandboxController` — plays the Agent Sandbox controller and the kubelet: every Sandbox
  runs as a real Docker container (host network, its own port), warm pools are kept full, claims
  bind warm sandboxes or cold-start one.
"""

from testkit.cluster._controller import SandboxController
from testkit.cluster._emulator import ClusterEmulator

__all__ = ["ClusterEmulator", "SandboxController"]
