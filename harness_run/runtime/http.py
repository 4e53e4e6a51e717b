"""Deprecated: :mod:`harness_run.runtime.server_client`'s name before 0.1.0 (the client of
``harness-run serve``; ``HttpEngine`` is now ``ServerEngine``). Importing it warns
(``DeprecationWarning``); it goes in the release after 0.1.0."""

import warnings

from harness_run.runtime import server_client as _new
from harness_run.runtime.server_client import *  # noqa: F403 (the same names, under the old module)
from harness_run.runtime.server_client import ServerEngine as HttpEngine

__all__ = ["HttpEngine", *_new.__all__]  # pyright: ignore[reportUnsupportedDunderAll]

warnings.warn(
    "harness_run.runtime.http is deprecated: import from harness_run.runtime.server_client (the same "
    "names; HttpEngine is now ServerEngine), or use harness_run.connect",
    DeprecationWarning,
    stacklevel=2,
)
