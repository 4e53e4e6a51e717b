"""Deprecated: :mod:`harness_run.runtime.worker_client`'s name before 0.1.0 (the client of the
in-image worker). Importing it warns (``DeprecationWarning``); it goes in the release after 0.1.0."""

import warnings

from harness_run.runtime import worker_client as _new
from harness_run.runtime.worker_client import *  # noqa: F403 (the same names, under the old module)

__all__ = [*_new.__all__]  # pyright: ignore[reportUnsupportedDunderAll]

warnings.warn(
    "harness_run.runtime.remote is deprecated: import from harness_run.runtime.worker_client (the same "
    "names), or harness_run.providers for the SandboxProvider port",
    DeprecationWarning,
    stacklevel=2,
)
