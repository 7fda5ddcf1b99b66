"""The fuzz suite prints its figures (tried, refused, 5xx, -32603, rows changed by refusals) per store."""

from __future__ import annotations

import pytest

from tests.fuzz._figures import report


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    lines = report()
    if lines:
        terminalreporter.section("fuzz figures")
        for line in lines:
            terminalreporter.write_line(line)
