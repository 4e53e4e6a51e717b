"""``python -m harness_run.worker``: the in-image worker (settings from the environment, see
harness_run.worker). Exits 0 after SIGTERM (the running turn is stopped and stored), 2 on bad
settings."""

from __future__ import annotations

import time

_STARTED = time.monotonic()

import asyncio  # noqa: E402
import logging  # noqa: E402
import os  # noqa: E402
import sys  # noqa: E402

from harness_run.errors import HarnessRunError  # noqa: E402


def main() -> int:
    logging.basicConfig(
        level=os.environ.get("HARNESS_RUN_WORKER_LOG_LEVEL", "INFO").upper(),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    from harness_run import telemetry
    from harness_run.worker._agent_net import confine_agent_network
    from harness_run.worker._app import load_spec, serve
    from harness_run.worker._privileges import drop_privileges
    from harness_run.worker._settings import WorkerSettings

    telemetry.configure_from_env("harness-run-worker")  # only with the otel extra and OTEL_* set
    try:
        # while root: the agent's network rules (from the spec's network), then the agent's uid (the
        # worker keeps only the capabilities it needs), then the settings as that user
        spec = load_spec(WorkerSettings.from_env(os.environ))
        confine_agent_network(os.environ, spec.network)
        agent_user = drop_privileges(os.environ)
        settings = WorkerSettings.from_env(os.environ, agent_user=agent_user)
        asyncio.run(serve(settings, started=_STARTED, spec=spec))
    except HarnessRunError as exc:
        print(f"harness-run worker: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:  # e.g. the port is taken
        print(f"harness-run worker: cannot serve: {exc}", file=sys.stderr)
        return 2
    finally:
        telemetry.shutdown()  # flush the spans of the last turn
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
