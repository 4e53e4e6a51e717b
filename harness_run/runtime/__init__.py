"""Engine -> Session -> Run, over one shared turn driver. Runtimes: ``local`` (sandbox next)."""

from harness_run.runtime._run import Run, RunStatus
from harness_run.runtime._session import ExecResult, Session

__all__ = ["ExecResult", "Run", "RunStatus", "Session"]
