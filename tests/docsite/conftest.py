"""The documentation tests' report: every example that is not run is listed with its reason."""

from __future__ import annotations

import pytest

from docsite.blocks import collect


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    try:
        groups = [g for g in collect() if g.skip_reason is not None]
    except ValueError:
        return  # test_directives_are_well_formed reports it
    if not groups or not any("test_doc_examples" in r.nodeid for r in _reports(terminalreporter)):
        return
    terminalreporter.section("documentation examples not run (compiled and type-checked only)")
    for group in groups:
        terminalreporter.write_line(f"{group.id}: {group.skip_reason}")


def _reports(reporter: pytest.TerminalReporter) -> list[pytest.TestReport]:
    return [r for stats in reporter.stats.values() for r in stats if isinstance(r, pytest.TestReport)]
