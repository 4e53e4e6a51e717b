"""harness-run's benchmarks: scripts that print numbers. Run one with ``python -m benchmarks NAME``
(``benchmarks/__main__.py``); their recorded runs are in ``benchmarks/results/``, the current figures
in ``benchmarks/RESULTS.md``."""
