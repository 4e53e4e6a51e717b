"""E2B sandboxes: each session in its own sandbox of the compiled template, paused when idle.

``pip install "harness-run[e2b]"`` (the ``e2b`` SDK, imported only when an engine is deployed or
used). :func:`deploy_e2b` compiles a spec, builds it as an E2B template unless it exists and
returns a :class:`E2BEngine`; :class:`E2BProvider` is the same for HarnessBox
(``HarnessBox(provider="e2b")``).
"""

from harness_run.runtime.e2b._engine import RUNTIME, E2BEngine, E2BProvider, deploy_e2b
from harness_run.runtime.e2b._sandboxes import E2BSandboxes
from harness_run.runtime.e2b._template import template_name

__all__ = ["RUNTIME", "E2BEngine", "E2BProvider", "E2BSandboxes", "deploy_e2b", "template_name"]
