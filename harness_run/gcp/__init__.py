"""``harness-run-gcp-setup``: audit → plan → apply of a GCP project for the sandbox runtime."""

from harness_run.gcp._cli import main
from harness_run.gcp._plan import AGENT_SANDBOX_VERSION, SetupOptions, Step, plan

__all__ = ["AGENT_SANDBOX_VERSION", "SetupOptions", "Step", "main", "plan"]
