"""The in-image worker: ``python -m harness_run.worker`` serves one sandbox's turns over HTTP.

The server runs the local runtime's code path (``LocalEngine``) against the shared history store
(``HARNESS_RUN_STORE``) and streams each turn's events as SSE. The client half of its protocol
(``WorkerClient`` and the request/response models) lives with the engines that use it, in
:mod:`harness_run.runtime.worker_client`.

Environment of the server: ``HARNESS_RUN_STORE`` (required: ``gs://bucket/prefix`` or a directory),
``HARNESS_RUN_WORKER_HOST`` (0.0.0.0), ``HARNESS_RUN_WORKER_PORT`` (8787), ``HARNESS_RUN_WORKDIR``
(``$HOME/.harness-run``), ``HARNESS_RUN_SPEC`` (``$HARNESS_RUN_ROOT/spec.json``),
``HARNESS_RUN_PODINFO`` (``/etc/harness-run/podinfo``: the pod's annotations, where the claim's
token hash arrives) or ``HARNESS_RUN_WORKER_TOKEN_SHA256``; ``HARNESS_RUN_VERTEX_PROJECT`` /
``HARNESS_RUN_VERTEX_REGION`` for Claude on Vertex AI without keys; ``HARNESS_RUN_AGENT_UID``: the
agent's processes run as that uid (the worker started as root with a few capabilities drops to the
image's user, see ``_privileges``); ``HARNESS_RUN_AGENT_NETNS=own``: the network namespace is the
worker's own, so before dropping root it confines that uid's packets to loopback (``shared``: the
host's, left alone; see ``_agent_net``); in a container without network, ``HARNESS_RUN_WORKER_SOCKET``
(serve on this unix socket instead of TCP), ``HARNESS_RUN_EGRESS_SOCKET`` and
``HARNESS_RUN_EGRESS_TOKEN`` (the host's egress proxy and the worker's pass through it). With the
spec's ``network`` not open and no egress socket (a pod), the worker runs the agent's egress proxy
itself.
"""

from harness_run.worker._vertex import vertex_env

__all__ = ["vertex_env"]
