"""`uv run python -m tests.fuzz.report`: run the fuzz suite on every configured store and print its figures.

Runs `pytest tests/fuzz`; the figures table closes the output (see `_figures.py`). PostgreSQL takes part when
`MCPHOST_TEST_POSTGRES_URL` is set; `MCPHOST_FUZZ_EXAMPLES=N` sets the examples per generated test.
"""

from __future__ import annotations

import sys

import pytest

if __name__ == "__main__":
    sys.exit(pytest.main(["tests/fuzz", "-q", "-p", "no:cacheprovider", *sys.argv[1:]]))
