"""`uv run python -m tests.fuzz.report`: run the fuzz suite on every configured store and print its figures.

Runs `pytest tests/fuzz`; the figures table closes the output (see `_figures.py`). PostgreSQL takes part when
`MCPHOST_TEST_POSTGRES_URL` is set; `MCPHOST_FUZZ_EXAMPLES=N` sets the examples per generated test, and
stretches the per-test timeout (a hang guard sized for CI's 8) in proportion.
"""

from __future__ import annotations

import sys

import pytest

from tests.fuzz._figures import examples

CI_EXAMPLES = 8
CI_TIMEOUT_S = 240

if __name__ == "__main__":
    timeout = CI_TIMEOUT_S * max(1, -(-examples(CI_EXAMPLES) // CI_EXAMPLES))
    sys.exit(
        pytest.main(["tests/fuzz", "-q", "-p", "no:cacheprovider", f"--timeout={timeout}", *sys.argv[1:]])
    )
