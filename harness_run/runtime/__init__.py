"""Engine -> Session -> Run over one turn path, with the runtimes side by side: ``local`` (harness
subprocesses on this host), ``container`` (a Docker container per session), ``sandbox`` (Agent
Sandbox claims), ``e2b`` and ``daytona``, all but the first through the in-image worker's client
in ``worker_client``; ``server_client`` is the client of ``harness-run serve``. Every runtime's
engine is an :class:`Engine`."""

from harness_run.runtime._agent_user import AgentUser
from harness_run.runtime._engine import Engine
from harness_run.runtime._process import ChildProcess, Spawned, kill_tree, release_reaper
from harness_run.runtime._run import Run, RunStatus
from harness_run.runtime._session import ExecResult, Session
from harness_run.runtime._stored import record_engine
from harness_run.runtime._transcript import Transcript, TranscriptEntry, load_transcript
from harness_run.runtime._workspace import WorkspaceLock, check_workspace, resolve_host_dir

__all__ = [
    "AgentUser",
    "ChildProcess",
    "Engine",
    "ExecResult",
    "Run",
    "RunStatus",
    "Session",
    "Spawned",
    "Transcript",
    "TranscriptEntry",
    "WorkspaceLock",
    "check_workspace",
    "kill_tree",
    "load_transcript",
    "record_engine",
    "release_reaper",
    "resolve_host_dir",
]
