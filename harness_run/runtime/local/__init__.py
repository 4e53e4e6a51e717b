"""The local runtime: harness subprocesses in per-session workspaces, history in SQLite."""

from harness_run.runtime.local._engine import LocalEngine, default_workdir, spec_version

__all__ = ["LocalEngine", "default_workdir", "spec_version"]
