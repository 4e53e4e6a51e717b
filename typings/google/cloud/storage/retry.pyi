# See __init__.pyi: only what harness_run.store uses.

from google.api_core.retry import Retry

DEFAULT_RETRY: Retry
