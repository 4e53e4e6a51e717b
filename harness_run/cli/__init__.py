"""The ``harness-run`` command line. One module per noun; each registers its subcommands."""

from harness_run.cli._main import main

__all__ = ["main"]
