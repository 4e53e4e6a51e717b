"""``python -m harness_run.gcp`` = ``harness-run-gcp-setup``."""

import sys

from harness_run.gcp import main

sys.exit(main())
